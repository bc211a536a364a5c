"""How much load one core of the autotune load generator can measure.

Two figures, each from a real `run_level` against a lean raw-asyncio SSE server
in a child process (pinned to another core when there is one):

1. capacity: the server streams OpenAI chat chunks (3 tokens each) as fast as
   it can; the client, pinned to one core, measures output tokens/s and SSE
   chunks/s. This is the most the client can count (or a lower bound if the
   server's core saturates first, which the table shows).
2. CPU share at a 5,000 tok/s-class load: the server paces 64 streams at
   78.125 tok/s each (3 tokens per chunk, one chunk per write, as a server
   emitting one decode step at a time); the client's process CPU time divided
   by wall time over the measured window is its load on its core.
3. the same paced load at 5x (25,000 tok/s): the client must still measure
   what the server sends (the "kept up" column compares with the offered rate).

    .venv/bin/python experiments/client_capacity.py [--json] [--duration 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.util import find_spec
from typing import Any

from autotune.bench import LevelResult, LevelSettings, Workload, run_level

TOKEN = " abc"  # four characters: one token for the client's length heuristic
TOKENS_PER_CHUNK = 3
PACED_STREAMS = 64
PACED_TOTAL_RATE = 5000.0


# -- the server (child process) ---------------------------------------------------------


def _event(text: str) -> bytes:
    obj = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "bench",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
        "usage": None,
    }
    data = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _tail(tokens: int) -> bytes:
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": tokens}}
    out = b""
    for obj in (finish, usage):
        data = b"data: " + json.dumps(obj).encode() + b"\n\n"
        out += f"{len(data):x}\r\n".encode() + data + b"\r\n"
    return out + b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
CHUNK = _event(TOKEN * TOKENS_PER_CHUNK)


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, rate: float) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = json.loads(await reader.readexactly(length)) if length else {}
            if head.startswith(b"GET"):
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                continue
            tokens = int(body.get("max_tokens", 16))
            chunks = max(1, tokens // TOKENS_PER_CHUNK)
            writer.write(HEAD)
            if rate > 0:
                step = TOKENS_PER_CHUNK / rate
                due = time.perf_counter()
                for _ in range(chunks):
                    due += step
                    delay = due - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    writer.write(CHUNK)
            else:
                for i in range(chunks):
                    writer.write(CHUNK)
                    if i % 16 == 15:
                        # Batches of 16 chunks keep this core well below the
                        # client's, so the client is what saturates.
                        await writer.drain()
                        await asyncio.sleep(0)
            writer.write(_tail(chunks * TOKENS_PER_CHUNK))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def serve(rate: float, core: int | None) -> None:
    if core is not None:
        os.sched_setaffinity(0, {core})

    def quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        # Streams cancelled when the benchmark stops us are expected.
        if not isinstance(context.get("exception"), asyncio.CancelledError):
            loop.default_exception_handler(context)

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(quiet)
        server = await asyncio.start_server(
            lambda r, w: _handle(r, w, rate), "127.0.0.1", 0, backlog=1024
        )
        print("PORT", server.sockets[0].getsockname()[1], flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()

    asyncio.run(main())


@contextlib.contextmanager
def server_process(rate: float, core: int | None) -> Iterator[tuple[str, int]]:
    cmd = [sys.executable, os.path.abspath(__file__), "--serve", "--rate", str(rate)]
    if core is not None:
        cmd += ["--core", str(core)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"bench server did not start: {line!r}")
        yield f"http://127.0.0.1:{line.split()[1]}", proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the client (this process) ------------------------------------------------------------


def measure(
    rate: float, concurrency: int, max_tokens: int, duration: float, cores: tuple[int, int] | None
) -> dict[str, Any]:
    client_core, server_core = cores if cores else (None, None)
    if client_core is not None:
        os.sched_setaffinity(0, {client_core})
    workload = Workload("bench", 0.0, True, max_tokens, ("bench prompt",))
    settings = LevelSettings(
        concurrency, min_duration_s=duration, max_duration_s=duration, ci_width=None
    )
    samples: list[tuple[float, float, float]] = []  # (wall, client CPU, server CPU)

    with server_process(rate, server_core) as (url, pid):

        def sample(status: dict[str, Any]) -> None:
            # CPU over the measured window only: warmup, ramp-up and drain run at
            # less than full load and would dilute the share.
            if status.get("phase") == "measuring":
                samples.append((time.perf_counter(), time.process_time(), _cpu_seconds(pid)))

        result: LevelResult = asyncio.run(
            run_level(url, "bench", workload, settings, on_progress=sample)
        )
    if len(samples) < 2:
        raise RuntimeError("window too short to sample CPU; raise --duration")
    wall = samples[-1][0] - samples[0][0]
    cpu = samples[-1][1] - samples[0][1]
    server_cpu = samples[-1][2] - samples[0][2]
    return {
        "concurrency": concurrency,
        "output_tok_s": round(result.output_throughput, 1),
        "chunks_s": round(result.output_throughput / result.tokens_per_chunk, 1),
        "tokens_per_chunk": round(result.tokens_per_chunk, 2),
        "client_cpu_share": round(cpu / wall, 3),
        "server_cpu_share": round(server_cpu / wall, 3),
        "window_s": round(result.window_s, 2),
        "errors": result.errors,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--duration", type=float, default=5.0, help="measured window, s")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rate", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--core", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args.rate, args.core)
        return 0

    available = sorted(os.sched_getaffinity(0))
    cores = (available[0], available[1]) if len(available) >= 2 else None
    capacity = measure(0.0, 64, 3000, args.duration, cores)
    per_stream = PACED_TOTAL_RATE / PACED_STREAMS
    paced = measure(per_stream, PACED_STREAMS, 600, args.duration, cores)
    paced5 = measure(5 * per_stream, PACED_STREAMS, 600, args.duration, cores)
    paced["offered_tok_s"], paced5["offered_tok_s"] = PACED_TOTAL_RATE, 5 * PACED_TOTAL_RATE
    report = {
        "cpu": _cpu_model(),
        "cores": f"client on core {cores[0]}, server on core {cores[1]}" if cores else "shared",
        "sniffio_installed": find_spec("sniffio") is not None,
        "capacity": capacity,
        "paced_5000": paced,
        "paced_25000": paced5,
        "headroom_vs_5000": round(capacity["output_tok_s"] / PACED_TOTAL_RATE, 1),
    }
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"CPU: {report['cpu']}; {report['cores']}; sniffio installed: "
          f"{report['sniffio_installed']}")  # fmt: skip
    print(
        f"{'run':<37}{'tok/s':>8}{'chunks/s':>10}{'kept up':>9}{'client CPU':>12}{'server CPU':>12}"
    )
    for name, row in (
        ("capacity (server as fast as it can)", capacity),
        ("paced 5,000 tok/s over 64 streams", paced),
        ("paced 25,000 tok/s over 64 streams", paced5),
    ):
        offered = row.get("offered_tok_s")
        kept = f"{row['output_tok_s'] / offered:.1%}" if offered else "-"
        print(
            f"{name:<37}{row['output_tok_s']:>8.0f}{row['chunks_s']:>10.0f}{kept:>9}"
            f"{row['client_cpu_share']:>12.0%}{row['server_cpu_share']:>12.0%}"
        )
    print(f"headroom over a 5,000 tok/s load: {report['headroom_vs_5000']}x")
    return 0


def _cpu_model() -> str:
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    raise SystemExit(main())
