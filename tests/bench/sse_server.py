"""A small streaming LLM server for the load-generator tests: real HTTP/1.1 on loopback.

It paces every stream at exactly `rate` tokens/s (the first chunk too: it
arrives k/rate after the prefill), sends `tokens_per_chunk` tokens per SSE
chunk the way a speculative server does, and keeps a ledger of everything it
sent so tests can compare the client's figures with the server's truth.

Each fake token is four characters (" abc"), so the client's length heuristic
sees token counts exactly; `usage` is still what the client must trust.

Runs on its own event loop in a thread (`running_server`) or replays recorded
stream bytes verbatim (`ReplayServer`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import signal
import string
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ServerConfig:
    rate: float = 200.0
    """Tokens per second of each stream."""
    tokens_per_chunk: tuple[int, ...] = (3,)
    """Tokens in consecutive chunks, cycled."""
    prefill_s: float = 0.0
    """Prefill time of each request, serialized across requests like one GPU would."""
    output_tokens: int | None = None
    """Stop with finish_reason "stop" after this many tokens (None: run to max_tokens)."""
    usage: bool = True
    """Honour stream_options.include_usage."""
    role_chunk: bool = True
    """Open chat streams with a role-only chunk, as SGLang and vLLM do."""
    fail_every: int = 0
    """Every n-th request fails (0: none), in the way `fail_mode` says."""
    fail_mode: str = "http500"
    """http500 | error_event | cut | malformed"""
    repeat_text: bool = False
    """Emit the same word over and over (degenerate output)."""


@dataclass
class ServerStats:
    requests: list[dict[str, Any]] = field(default_factory=list)
    ledger: list[tuple[float, int]] = field(default_factory=list)
    """(time.time() at send, tokens) for every chunk that carried tokens."""
    active_changes: list[tuple[float, int]] = field(default_factory=list)
    """(time.time(), active streams after the change)."""
    active: int = 0
    max_active: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerStats:
        return cls(
            requests=data["requests"],
            ledger=[(t, n) for t, n in data["ledger"]],
            active_changes=[(t, a) for t, a in data["active_changes"]],
            max_active=data["max_active"],
        )

    def tokens_between(self, start: float, end: float) -> int:
        return sum(n for t, n in self.ledger if start < t <= end)

    def mean_active(self, start: float, end: float) -> float:
        """Time-weighted number of open streams over [start, end]."""
        level, last, area = 0, start, 0.0
        for t, a in self.active_changes:
            if t <= start:
                level = a
                continue
            if t >= end:
                break
            area += level * (t - last)
            level, last = a, t
        area += level * (end - last)
        return area / (end - start)


class FakeLLMServer:
    def __init__(self, config: ServerConfig | None = None) -> None:
        self.config = config or ServerConfig()
        self.stats = ServerStats()
        self._prefill_lock: asyncio.Lock | None = None
        self._count = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._prefill_lock = self._prefill_lock or asyncio.Lock()
        try:
            while True:
                request = await read_request(reader)
                if request is None:
                    break
                method, path, body = request
                keep = await self.route(method, path, body, writer)
                if not keep:
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def route(
        self, method: str, path: str, body: bytes, writer: asyncio.StreamWriter
    ) -> bool:
        if method == "GET" and path == "/v1/models":
            await write_json(writer, 200, {"object": "list", "data": [{"id": "fake-model"}]})
            return True
        if method == "GET" and path == "/stats":
            await write_json(writer, 200, self.stats_json())
            return True
        if method == "GET" and path == "/health":
            await write_json(writer, 200, {})
            return True
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions", "/generate"):
            return await self.stream(path, json.loads(body), writer)
        await write_json(writer, 404, {"error": {"message": f"no route {method} {path}"}})
        return True

    async def stream(self, path: str, req: dict[str, Any], writer: asyncio.StreamWriter) -> bool:
        cfg, st = self.config, self.stats
        self._count += 1
        number = self._count
        failing = cfg.fail_every and number % cfg.fail_every == 0
        if failing and cfg.fail_mode == "http500":
            await write_json(writer, 500, {"error": {"message": "injected failure"}})
            return True
        native = path == "/generate"
        max_tokens = req["sampling_params"]["max_new_tokens"] if native else req["max_tokens"]
        want_usage = bool(req.get("stream_options", {}).get("include_usage")) and cfg.usage
        total = max_tokens if cfg.output_tokens is None else min(max_tokens, cfg.output_tokens)
        record = {"path": path, "max_tokens": max_tokens, "start": time.time(), "tokens": 0}
        st.requests.append(record)
        self._set_active(+1)
        rng = random.Random(number)
        try:
            await write_head(writer, 200, "text/event-stream", chunked=True)
            kind = "chat" if path.endswith("chat/completions") else "text"
            if kind == "chat" and cfg.role_chunk and not native:
                await write_chunk(writer, sse(chat_chunk({"role": "assistant", "content": ""})))
            assert self._prefill_lock is not None
            async with self._prefill_lock:
                await asyncio.sleep(cfg.prefill_s)
            t = time.perf_counter()
            sent, chunk_no, text_so_far = 0, 0, ""
            while sent < total:
                k = min(cfg.tokens_per_chunk[chunk_no % len(cfg.tokens_per_chunk)], total - sent)
                t += k / cfg.rate
                delay = t - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                text = "".join(" " + word(rng, cfg.repeat_text) for _ in range(k))
                sent += k
                chunk_no += 1
                if failing and sent > total // 2:
                    await self._fail_mid_stream(writer)
                    return False
                if native:
                    text_so_far += text
                    payload = {
                        "text": text_so_far,
                        "meta_info": {
                            "prompt_tokens": 10,
                            "completion_tokens": sent,
                            "spec_verify_ct": chunk_no,
                            "finish_reason": None,
                        },
                    }
                elif kind == "chat":
                    payload = chat_chunk({"content": text})
                else:
                    payload = text_chunk(text)
                await write_chunk(writer, sse(payload))
                st.ledger.append((time.time(), k))
                record["tokens"] = sent
            reason = "length" if total == max_tokens else "stop"
            if native:
                payload = {
                    "text": text_so_far,
                    "meta_info": {
                        "prompt_tokens": 10,
                        "completion_tokens": sent,
                        "spec_verify_ct": chunk_no,
                        "finish_reason": {"type": reason},
                    },
                }
                await write_chunk(writer, sse(payload))
            else:
                finish = chat_chunk({}, reason) if kind == "chat" else text_chunk("", reason)
                await write_chunk(writer, sse(finish))
                if want_usage:
                    usage = {"prompt_tokens": 10, "completion_tokens": sent,
                             "total_tokens": 10 + sent}  # fmt: skip
                    await write_chunk(writer, sse({"choices": [], "usage": usage}))
            await write_chunk(writer, b"data: [DONE]\n\n")
            await write_chunk(writer, b"")
            record["end"] = time.time()
            return True
        finally:
            self._set_active(-1)

    async def _fail_mid_stream(self, writer: asyncio.StreamWriter) -> None:
        mode = self.config.fail_mode
        if mode == "error_event":
            err = {"error": {"message": "injected error", "type": "InternalError", "code": 500}}
            await write_chunk(writer, sse(err))
            await write_chunk(writer, b"data: [DONE]\n\n")
            await write_chunk(writer, b"")
        elif mode == "malformed":
            await write_chunk(writer, b'data: {"choices": [{"delta": {"content": "x"\n\n')
            await write_chunk(writer, b"data: [DONE]\n\n")
            await write_chunk(writer, b"")
        else:  # cut: the connection drops mid-body
            writer.transport.abort()

    def stats_json(self) -> dict[str, Any]:
        st = self.stats
        return {
            "requests": st.requests,
            "ledger": st.ledger,
            "active_changes": st.active_changes,
            "max_active": st.max_active,
        }

    def _set_active(self, delta: int) -> None:
        st = self.stats
        st.active += delta
        st.max_active = max(st.max_active, st.active)
        st.active_changes.append((time.time(), st.active))


_LETTERS = string.ascii_lowercase


def word(rng: random.Random, repeat: bool) -> str:
    return "abc" if repeat else "".join(rng.choice(_LETTERS) for _ in range(3))


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        "usage": None,
    }


def text_chunk(text: str, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": "fake-model",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
    }


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


# -- minimal HTTP/1.1 ---------------------------------------------------------------


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return method, path, body


async def write_head(
    writer: asyncio.StreamWriter, status: int, ctype: str, *, chunked: bool, length: int = 0
) -> None:
    reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}.get(status, "X")
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
    head += "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {length}\r\n"
    writer.write((head + "\r\n").encode())
    await writer.drain()


async def write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    """One HTTP chunk; empty data ends the body."""
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()


async def write_json(writer: asyncio.StreamWriter, status: int, obj: Any) -> None:
    data = json.dumps(obj).encode()
    await write_head(writer, status, "application/json", chunked=False, length=len(data))
    writer.write(data)
    await writer.drain()


# -- replay of recorded bytes -----------------------------------------------------------


class ReplayServer:
    """Answers every POST with recorded bytes, written in the given pieces.

    `pieces` splits the body into separate TCP writes (with a pause between),
    so events arrive split across reads exactly where the test says.
    """

    def __init__(
        self, body: bytes, *, pieces: list[int] | None = None, pause_s: float = 0.01,
        cut: bool = False, status: int = 200,
    ) -> None:  # fmt: skip
        self.body = body
        self.pieces = pieces
        self.pause_s = pause_s
        self.cut = cut
        self.status = status

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (request := await read_request(reader)) is not None:
                method, _path, _ = request
                if method == "GET":
                    await write_json(writer, 200, {"data": [{"id": "replay"}]})
                    continue
                if self.status != 200:
                    await write_json(writer, self.status, {"error": {"message": "refused"}})
                    continue
                await write_head(writer, 200, "text/event-stream", chunked=True)
                for part in split(self.body, self.pieces):
                    await write_chunk(writer, part)
                    await asyncio.sleep(self.pause_s)
                if self.cut:
                    writer.transport.abort()
                    return
                await write_chunk(writer, b"")
        except ConnectionError:
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()


def split(body: bytes, pieces: list[int] | None) -> list[bytes]:
    if not pieces:
        return [body]
    out, pos = [], 0
    for size in pieces:
        out.append(body[pos : pos + size])
        pos += size
    if pos < len(body):
        out.append(body[pos:])
    return [p for p in out if p]


# -- running a server on its own loop ----------------------------------------------------


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # Handlers cancelled at shutdown are expected; anything else is reported.
    if not isinstance(context.get("exception"), asyncio.CancelledError):
        loop.default_exception_handler(context)


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Any]


@contextlib.contextmanager
def running_server(handler: Handler) -> Iterator[str]:
    """Serve `handler` on 127.0.0.1 (free port) in a thread; yield the base URL.

    The server stops when the block exits, also when the test failed: open
    connections are cut, handlers get a second to notice, stragglers are cancelled.
    """
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}
    writers: set[asyncio.StreamWriter] = set()

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.add(writer)
        try:
            await handler(reader, writer)
        finally:
            writers.discard(writer)

    async def main() -> None:
        stop = asyncio.Event()
        box["stop"] = stop
        server = await asyncio.start_server(tracked, "127.0.0.1", 0)
        box["port"] = server.sockets[0].getsockname()[1]
        ready.set()
        await stop.wait()
        server.close()
        for writer in list(writers):
            writer.transport.abort()
        others = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
        if others:
            _, pending = await asyncio.wait(others, timeout=1.0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    def run() -> None:
        loop.set_exception_handler(_quiet)
        try:
            loop.run_until_complete(main())
        finally:
            ready.set()

    thread = threading.Thread(target=run, name="fake-llm-server", daemon=True)
    thread.start()
    ready.wait(10)
    if "port" not in box:
        raise RuntimeError("test server did not start")
    try:
        yield f"http://127.0.0.1:{box['port']}"
    finally:
        loop.call_soon_threadsafe(box["stop"].set)
        thread.join(10)
        loop.close()


# -- running the fake server in its own process -----------------------------------------
#
# Timing tests need the server out of the client's process: two threads share one
# GIL, and its 5 ms switch interval adds milliseconds to every request turnaround.


class ServerProcess:
    def __init__(self, url: str, proc: subprocess.Popen[str]) -> None:
        self.url = url
        self.proc = proc

    def stats(self) -> ServerStats:
        import httpx

        resp = httpx.get(self.url + "/stats", timeout=10, trust_env=False)
        return ServerStats.from_json(resp.json())


@contextlib.contextmanager
def server_process(config: ServerConfig) -> Iterator[ServerProcess]:
    """Start the fake server in a child process on a free loopback port; stop it by PID."""
    cmd = [sys.executable, "-m", "tests.bench.sse_server", json.dumps(dataclasses.asdict(config))]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"fake server did not start: {line!r}")
        yield ServerProcess(f"http://127.0.0.1:{int(line.split()[1])}", proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def _serve_main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config", help="ServerConfig as JSON")
    args = parser.parse_args()
    raw = json.loads(args.config)
    raw["tokens_per_chunk"] = tuple(raw["tokens_per_chunk"])
    server = FakeLLMServer(ServerConfig(**raw))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_quiet)
        srv = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        print("PORT", srv.sockets[0].getsockname()[1], flush=True)
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        srv.close()

    asyncio.run(main())


if __name__ == "__main__":
    _serve_main()
