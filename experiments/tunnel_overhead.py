"""What reaching the server through the SSH link costs: direct, paramiko's forward (what
autotune uses) and OpenSSH's `ssh -N -L`, side by side in one run.

    .venv/bin/python experiments/tunnel_overhead.py [--server sim|llama|both] [--rounds 3]

A real sshd on 127.0.0.1 (the tests' own, autotune/testservers/sshd.py) in front of the simulated
SGLang server and of the real llama-server. Each round measures every level once per way,
the ways in a new order each round, so that drift hits all alike; the table gives the
median over the rounds of throughput, TTFT p50/p99 and ITL p50 per level, and each way's
ratio to direct. Writes experiments/results/tunnel_overhead.md. Needs root (sshd); never run it
beside a build or the test suite.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from autotune import log  # noqa: E402
from autotune.bench import LevelSettings, load_workload, run_level  # noqa: E402
from autotune.deploy.ssh_runner import SSHRunner, SSHSettings  # noqa: E402
from autotune.deploy.tunnel import Tunnel  # noqa: E402
from autotune.testservers.sshd import SshServer, free_port, keygen  # noqa: E402

#: The simulator serves 64 streams at a real server's pace; llama-server on this CPU
#: (2 cores, a 270M model) does not finish a c=64 level in minutes, so it is measured to 16.
LEVELS = {"sim": (1, 16, 64), "llama": (1, 4, 16)}
WAYS = ("direct", "paramiko", "openssh")
FIGURES = ("output_throughput", "ttft_ms_p50", "ttft_ms_p99", "itl_ms_p50")


def _wait(url: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise SystemExit(f"nothing answered at {url}")


@contextlib.contextmanager
def _process(argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


@contextlib.contextmanager
def _server(kind: str) -> Iterator[tuple[int, str]]:
    """(port, health path) of a server on 127.0.0.1."""
    port = free_port()
    if kind == "sim":
        argv = [sys.executable, "-m", "autotune.sim", "--port", str(port), "--host", "127.0.0.1"]
        argv += ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"]
        argv += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
        argv += ["--sim-load-time", "0.5", "--sim-seed", "1"]
    else:
        from autotune.testservers import llamacpp as installed

        argv = [str(installed.binary()), "--model", str(installed.model())]
        argv += ["--host", "127.0.0.1", "--port", str(port), "--parallel", "16"]
        argv += ["--ctx-size", str(16 * 512), "--threads", "2"]
    with _process(argv):
        _wait(f"http://127.0.0.1:{port}/health")
        yield port, "/health"


@contextlib.contextmanager
def _ways(tmp: Path, port: int) -> Iterator[dict[str, str]]:
    """The server's URL each way: direct, through paramiko's forward, through `ssh -L`."""
    server = SshServer(tmp / "sshd")
    key = keygen(tmp / "client" / "id_ed25519")
    server.authorize("root", key)
    known = server.write_known_hosts(tmp / "client" / "known_hosts")
    server.start()
    runner = SSHRunner(
        SSHSettings(
            host="127.0.0.1",
            port=server.port,
            user="root",
            key_file=str(key),
            known_hosts=str(known),
            use_agent=False,
        )
    )
    tunnel = Tunnel(runner, port)
    try:
        local = tunnel.open()
        forward = free_port()
        ssh = ["ssh", "-N", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={known}"]
        ssh += ["-i", str(key), "-p", str(server.port)]
        ssh += ["-L", f"127.0.0.1:{forward}:127.0.0.1:{port}"]
        with _process([*ssh, "root@127.0.0.1"]):
            _wait(f"http://127.0.0.1:{forward}/health", timeout=30)
            yield {
                "direct": f"http://127.0.0.1:{port}",
                "paramiko": f"http://127.0.0.1:{local}",
                "openssh": f"http://127.0.0.1:{forward}",
            }
    finally:
        tunnel.close()
        runner.close()
        server.stop()


def _measure(url: str, c: int, seconds: float, max_tokens: int) -> dict[str, float]:
    workload = load_workload("natural", max_tokens=max_tokens, seed=1)
    settings = LevelSettings(concurrency=c, min_duration_s=seconds, max_duration_s=seconds)
    level = asyncio.run(run_level(url, None, workload, settings))
    return {f: float(getattr(level, f) or 0.0) for f in FIGURES}


def run(kind: str, rounds: int, seconds: float, say: Callable[..., None]) -> list[str]:
    got: dict[tuple[str, int], list[dict[str, float]]] = {}
    order = list(WAYS)
    rng = random.Random(7)
    with (
        tempfile.TemporaryDirectory() as tmp,
        _server(kind) as (port, _),
        _ways(Path(tmp), port) as urls,
    ):
        for r in range(rounds):
            rng.shuffle(order)
            for c in LEVELS[kind]:
                for way in order:
                    tokens = 128 if kind == "sim" else 64
                    got.setdefault((way, c), []).append(_measure(urls[way], c, seconds, tokens))
            say(f"{kind}: round {r + 1}/{rounds} done", flush=True)
    rows = [
        f"### {kind}\n",
        "| level | way | tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | tok/s vs direct "
        "| TTFT p50 vs direct |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in LEVELS[kind]:
        base = {f: statistics.median(m[f] for m in got[("direct", c)]) for f in FIGURES}
        for way in WAYS:
            med = {f: statistics.median(m[f] for m in got[(way, c)]) for f in FIGURES}
            tok, base_tok = med["output_throughput"], base["output_throughput"]
            ratio = tok / base_tok - 1 if base_tok else 0.0
            dttft = med["ttft_ms_p50"] - base["ttft_ms_p50"]
            rows.append(
                f"| c={c} | {way} | {tok:.1f} | {med['ttft_ms_p50']:.1f} | "
                f"{med['ttft_ms_p99']:.1f} | {med['itl_ms_p50']:.2f} | {ratio:+.2%} | "
                f"{dttft:+.1f} ms |"
            )
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--server", choices=("sim", "llama", "both"), default="both")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=8.0, help="steady state per level")
    args = p.parse_args()
    log.setup("WARNING")
    started = time.monotonic()
    kinds = ("sim", "llama") if args.server == "both" else (args.server,)
    sections = [run(k, args.rounds, args.seconds, print) for k in kinds]
    took = time.monotonic() - started
    out = REPO / "experiments" / "results" / "tunnel_overhead.md"
    text = [
        "# The benchmark through the SSH link: what the tunnel costs\n",
        f"Generated by `experiments/tunnel_overhead.py --server {args.server} "
        f"--rounds {args.rounds} "
        f"--seconds {args.seconds:g}` in {took:.0f} s on {os.cpu_count()} cores: a real sshd "
        "on 127.0.0.1, every level once per way in each round (the ways shuffled per round), "
        "medians over the rounds. `paramiko` is the forward autotune opens over its own SSH "
        "connection (autotune/deploy/tunnel.py); `openssh` is `ssh -N -L` with the same key.\n",
    ]
    for rows in sections:
        text += ["\n".join(rows), ""]
    out.write_text("\n".join(text) + "\n")
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
