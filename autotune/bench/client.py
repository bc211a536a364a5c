"""Send one streaming request and record it: the only code on the hot path."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
from collections.abc import AsyncIterator
from time import perf_counter
from typing import TYPE_CHECKING, Any

import httpx

from autotune.bench.protocol import (
    ENDPOINTS,
    ChunkReader,
    StreamError,
    check_endpoint,
    chunk_reader,
    request_body,
)
from autotune.bench.record import RequestRecord
from autotune.bench.sse import SSEDecoder
from autotune.bench.transport import StreamingTransport

if TYPE_CHECKING:
    from autotune.bench.workload import Workload


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA bundle costs ~40 ms: once per process, not once per level.
    return httpx.create_ssl_context()


def make_client(
    base_url: str, concurrency: int, *, api_key: str | None, timeout_s: float
) -> httpx.AsyncClient:
    """One client for a level: at most `concurrency` keep-alive HTTP/1.1 connections.

    The pool is the concurrency limit's twin: a smaller one would queue requests
    inside the client and the server would see fewer streams. The transport is
    `StreamingTransport` (see there for why not httpx's default).
    """
    headers = {"Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return httpx.AsyncClient(
        base_url=base_url.rstrip("/"),
        headers=headers,
        transport=StreamingTransport(
            max_connections=concurrency,
            tls=_tls_context() if base_url.startswith("https:") else None,
            connect_timeout_s=min(timeout_s, 30.0),
        ),
        # No per-read timer: `Streamer.send` bounds the whole request, and a timer
        # per read would cost ~25 µs on every chunk.
        timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 30.0), read=None),
        # An inference server on loopback or a LAN must not go through a proxy
        # from the environment.
        trust_env=False,
    )


@contextlib.asynccontextmanager
async def open_streamer(
    base_url: str,
    connections: int,
    workload: Workload,
    *,
    endpoint: str,
    model: str | None,
    api_key: str | None,
    timeout_s: float,
) -> AsyncIterator[Streamer]:
    """A client of at most `connections` streams and a `Streamer` of `workload` on it.

    `model` None asks `/v1/models` (and sends no model if that fails; `generate` needs none).
    """
    check_endpoint(endpoint)
    async with make_client(base_url, connections, api_key=api_key, timeout_s=timeout_s) as client:
        if model is None and endpoint != "generate":
            model = await discover_model(client)
        yield Streamer(
            client,
            endpoint,
            model=model,
            temperature=workload.temperature,
            ignore_eos=workload.ignore_eos,
            timeout_s=timeout_s,
        )


async def discover_model(client: httpx.AsyncClient) -> str | None:
    """The first model the server lists, or None (then requests carry no model)."""
    try:
        resp = await client.get("/v1/models", timeout=10.0)
        data = resp.json().get("data") if resp.status_code == 200 else None
        if isinstance(data, list) and data and isinstance(data[0], dict):
            ident = data[0].get("id")
            return ident if isinstance(ident, str) else None
    except (httpx.HTTPError, ValueError, AttributeError):
        pass
    return None


class Streamer:
    """Sends requests of one workload to one endpoint and fills `RequestRecord`s."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        endpoint: str,
        *,
        model: str | None,
        temperature: float,
        ignore_eos: bool,
        timeout_s: float,
    ) -> None:
        self.client = client
        self.endpoint = endpoint
        self.path = ENDPOINTS[endpoint]
        self.model = model
        self.temperature = temperature
        self.ignore_eos = ignore_eos
        self.timeout_s = timeout_s

    def body(self, prompt: Any, max_tokens: int) -> bytes:
        return json.dumps(
            request_body(
                self.endpoint,
                prompt,
                model=self.model,
                max_tokens=max_tokens,
                temperature=self.temperature,
                ignore_eos=self.ignore_eos,
            )
        ).encode()

    async def send(self, rec: RequestRecord, prompt: Any) -> RequestRecord:
        """Stream one request into `rec`. Never raises for server or network failures:
        they land in `rec.error`, because a closed loop must keep its C slots busy."""
        content = self.body(prompt, rec.max_tokens)
        reader = chunk_reader(self.endpoint)
        rec.start = perf_counter()
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._stream(rec, content, reader)
        except TimeoutError:
            rec.error = f"timeout: no complete response within {self.timeout_s:g} s"
        except StreamError as exc:
            rec.error = str(exc)
        except httpx.TimeoutException as exc:
            rec.error = f"timeout: {type(exc).__name__}"
        except httpx.HTTPError as exc:
            rec.error = f"connection error: {type(exc).__name__}: {exc}".rstrip(": ")
        rec.end = perf_counter()
        if rec.error is None and not rec.done and rec.finish_reason is None:
            rec.error = "stream ended before [DONE] and without a finish_reason (cut?)"
        return rec

    async def _stream(self, rec: RequestRecord, content: bytes, reader: ChunkReader) -> None:
        headers = {"Content-Type": "application/json"}
        async with self.client.stream("POST", self.path, content=content, headers=headers) as resp:
            if resp.status_code != 200:
                detail = (await resp.aread())[:300].decode("utf-8", "replace").strip()
                rec.error = f"HTTP {resp.status_code} from {self.path}: {detail}"
                return
            decoder = SSEDecoder()
            done = False
            # Raw bytes skip httpx's decoder layers, unless the server compressed.
            chunks = resp.aiter_bytes() if "content-encoding" in resp.headers else resp.aiter_raw()
            # Read to the end even after [DONE]: an unread body would cost the
            # keep-alive connection.
            async for raw in chunks:
                t = perf_counter()
                if done:
                    continue
                for payload in decoder.feed(raw):
                    if reader(rec, payload, t):
                        done = True
                        break
            if not done and decoder.pending:
                # An event without its closing blank line: a `[DONE]` from a sloppy
                # server is fine, half a JSON object means the stream was cut.
                t = perf_counter()
                try:
                    for payload in decoder.close():
                        reader(rec, payload, t)
                except StreamError:
                    raise StreamError("stream ended inside an event (cut?)") from None
