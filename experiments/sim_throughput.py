"""How much streaming load the simulated server sustains, and whether it keeps its schedule.

Starts the real simulator, drives N concurrent streams from a *separate*
client process (so that on a 2-core machine the client's CPU is not the
server's), and reports streamed tokens/s and chunks/s next to what the
performance model predicts for the same flags. If the server cannot keep up
with its own model, measured falls below predicted and the scheduler's lag
and resync counters say so.

    .venv/bin/python experiments/sim_throughput.py                 # 64 streams, fast profile
    .venv/bin/python experiments/sim_throughput.py --streams 16 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from typing import Any

from autotune.testservers.ports import free_port as _free_port

DEFAULT_SIM_FLAGS = [
    "--sim-profile", "llama3.1-8b-eagle3-h100",
    "--speculative-algorithm", "EAGLE3",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
    "--sim-noise", "0.01",
    "--sim-seed", "7",
]  # fmt: skip
PROMPT = "word " * 190  # about 200 tokens at 4 characters a token, like autotune's default


# -- client process ----------------------------------------------------------------------
async def _stream_loop(
    host: str,
    port: int,
    body: bytes,
    stop_at: float,
    out: list[tuple[float, float, int]],
    chunk_times: list[float],
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    try:
        while time.monotonic() < stop_at:
            t0 = time.monotonic()
            writer.write(head + body)
            status = await reader.readline()
            if b" 200 " not in status:
                raise RuntimeError(f"server answered {status!r}")
            while (await reader.readline()) not in (b"\r\n", b""):
                pass
            tokens, buf = 0, b""
            while True:
                size = int((await reader.readline()).strip(), 16)
                if size == 0:
                    await reader.readline()
                    break
                buf += await reader.readexactly(size + 2)
                buf = buf[:-2] if buf.endswith(b"\r\n") else buf
                *events, buf = buf.split(b"\n\n")
                now = time.monotonic()
                for ev in events:
                    if b'"usage":{' in ev:
                        tokens = json.loads(ev[6:])["usage"]["completion_tokens"]
                    elif b'"content":"' in ev and b'"content":""' not in ev:
                        chunk_times.append(now)
            out.append((t0, time.monotonic(), tokens))
    finally:
        writer.close()


async def _client(url: str, streams: int, duration: float, warmup: float, max_tokens: int) -> None:
    host, port = url.rsplit("//", 1)[1].split(":")
    body = json.dumps(
        {
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    t_start = time.monotonic()
    stop_at = t_start + warmup + duration
    recs: list[tuple[float, float, int]] = []
    chunk_times: list[float] = []
    cpu0 = time.process_time()
    await asyncio.gather(
        *(_stream_loop(host, int(port), body, stop_at, recs, chunk_times) for _ in range(streams))
    )
    w0, w1 = t_start + warmup, stop_at
    # A request's tokens count in the window in proportion to its overlap with it.
    tokens = sum(n * max(0.0, min(e, w1) - max(s, w0)) / (e - s) for s, e, n in recs if e > s)
    chunks = sum(1 for t in chunk_times if w0 <= t <= w1)
    print(
        json.dumps(
            {
                "window_s": w1 - w0,
                "requests": len(recs),
                "tokens_per_s": tokens / (w1 - w0),
                "chunks_per_s": chunks / (w1 - w0),
                "client_cpu_s": time.process_time() - cpu0,
                "window_mono": [w0, w1],
            }
        )
    )


# -- driver -----------------------------------------------------------------------------
def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read() or b"null")


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"simulator exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("simulator did not become ready")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _predicted(flags: list[str], streams: int, max_tokens: int, input_len: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "autotune.sim", "--predict", *flags,
         "--concurrency", str(streams), "--max-tokens", str(max_tokens),
         "--input-len", str(input_len)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return json.loads(out.stdout.splitlines()[0])


def run(streams: int, duration: float, warmup: float, max_tokens: int, flags: list[str]) -> dict:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    flags = [*flags, "--max-running-requests", str(streams)]
    server = subprocess.Popen(
        [sys.executable, "-m", "autotune.sim", *flags, "--port", str(port),
         "--sim-load-time", "0.2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_ready(url, server)
        cpu0 = _cpu_seconds(server.pid)
        client = subprocess.run(
            [sys.executable, __file__, "--client", url, "--streams", str(streams),
             "--duration", str(duration), "--warmup", str(warmup),
             "--max-tokens", str(max_tokens)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        server_cpu = _cpu_seconds(server.pid) - cpu0
        measured = json.loads(client.stdout.splitlines()[-1])
        stats = _get(url + "/sim/stats")
    finally:
        server.terminate()
        server.wait(10)
    w0, w1 = measured["window_mono"]
    ring = [(t, n) for t, n in stats["ring"] if w0 <= t <= w1]
    server_tps = (ring[-1][1] - ring[0][1]) / (ring[-1][0] - ring[0][0]) if len(ring) > 1 else 0.0
    input_len = -(-len(PROMPT) // 4) + 9
    pred = _predicted(flags, streams, max_tokens, input_len)
    expected = pred["output_throughput"] / stats["speed_factor"]
    total = warmup + duration
    return {
        "streams": streams,
        "predicted_tok_s": round(pred["output_throughput"], 1),
        "expected_tok_s": round(expected, 1),
        "client_tok_s": round(measured["tokens_per_s"], 1),
        "server_tok_s": round(server_tps, 1),
        "chunks_s": round(measured["chunks_per_s"], 1),
        "accept_length": pred["accept_length"],
        "requests": measured["requests"],
        "kept_up": measured["tokens_per_s"] >= 0.95 * expected
        and stats["scheduler"]["resyncs"] == 0,
        "ratio": round(measured["tokens_per_s"] / expected, 4),
        "lag_mean_ms": stats["scheduler"]["lag_mean_ms"],
        "lag_max_ms": stats["scheduler"]["lag_max_ms"],
        "resyncs": stats["scheduler"]["resyncs"],
        "server_cpu_pct": round(100 * server_cpu / total, 1),
        "client_cpu_pct": round(100 * measured["client_cpu_s"] / total, 1),
    }


def _table(rows: list[dict[str, Any]]) -> str:
    cols = [
        ("streams", "streams"), ("predicted_tok_s", "model tok/s"),
        ("expected_tok_s", "expected*"), ("client_tok_s", "client tok/s"),
        ("server_tok_s", "server tok/s"), ("chunks_s", "chunks/s"), ("ratio", "client/exp"),
        ("lag_mean_ms", "lag ms"), ("lag_max_ms", "lag max"), ("resyncs", "resyncs"),
        ("server_cpu_pct", "srv CPU%"), ("client_cpu_pct", "cli CPU%"), ("kept_up", "kept up"),
    ]  # fmt: skip
    widths = [max(len(h), *(len(str(r[k])) for r in rows)) for k, h in cols]
    lines = ["  ".join(h.rjust(w) for (_, h), w in zip(cols, widths, strict=True))]
    for r in rows:
        lines.append("  ".join(str(r[k]).rjust(w) for (k, _), w in zip(cols, widths, strict=True)))
    lines.append("* expected = model prediction / this start's speed factor (--sim-noise)")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--streams", type=int, nargs="+", default=[64])
    p.add_argument("--duration", type=float, default=12.0, help="measured window, seconds")
    p.add_argument("--warmup", type=float, default=3.0, help="ramp-up not measured, seconds")
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--json", action="store_true", help="one JSON object per row")
    p.add_argument("--client", metavar="URL", help=argparse.SUPPRESS)
    p.add_argument(
        "sim_flags", nargs="*",
        help="simulator flags after --, instead of the fast default profile",
    )  # fmt: skip
    a = p.parse_args()
    if a.client:
        asyncio.run(_client(a.client, a.streams[0], a.duration, a.warmup, a.max_tokens))
        return 0
    flags = a.sim_flags or DEFAULT_SIM_FLAGS
    rows = [run(n, a.duration, a.warmup, a.max_tokens, flags) for n in a.streams]
    if a.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(_table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
