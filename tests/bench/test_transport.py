"""The streaming HTTP/1.1 transport against a raw loopback server that misbehaves on cue."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
import pytest

from autotune.bench.transport import StreamingTransport

from .sse_server import running_server

BODY = b"data: one\n\n" + b"data: " + b"x" * 300 + b"\n\ndata: [DONE]\n\n"


def chunked(body: bytes, sizes: list[int]) -> bytes:
    out, pos = b"", 0
    for size in [*sizes, len(body)]:
        part = body[pos : pos + size]
        if part:
            out += b"%x\r\n%s\r\n" % (len(part), part)
        pos += len(part)
    return out + b"0\r\n\r\n"


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + chunked(BODY, [11, 5, 200])
)


class RawServer:
    """GET /split/N answers CHUNKED written in two TCP sends split at byte N;
    other paths answer as their name says."""

    def __init__(self) -> None:
        self.connections = 0
        self.open = 0
        self.max_open = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                path = head.split(b" ")[1].decode()
                if path.startswith("/split/"):
                    cut = int(path.rsplit("/", 1)[1])
                    writer.write(CHUNKED[:cut])
                    await writer.drain()
                    await asyncio.sleep(0.002)
                    writer.write(CHUNKED[cut:])
                elif path == "/length":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
                elif path == "/close":
                    writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil eof")
                    await writer.drain()
                    return
                elif path == "/cut":
                    writer.write(CHUNKED[:130])
                    await writer.drain()
                    return
                elif path == "/idle-close":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    await writer.drain()
                    await asyncio.sleep(0.05)
                    return  # closes the kept-alive connection while the client idles
                elif path == "/slow":
                    await asyncio.sleep(0.2)
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                elif path == "/empty":
                    writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
                await writer.drain()
        finally:
            self.open -= 1
            writer.close()


def run(server: RawServer, body: Any) -> Any:
    async def go(url: str) -> Any:
        async with httpx.AsyncClient(
            base_url=url, transport=StreamingTransport(max_connections=2)
        ) as client:
            return await body(client)

    with running_server(server.handle) as url:
        return asyncio.run(go(url))


def test_chunked_body_split_at_every_byte_and_connection_reused() -> None:
    server = RawServer()

    async def body(client: httpx.AsyncClient) -> list[bytes]:
        out = []
        for cut in range(1, len(CHUNKED)):
            async with client.stream("GET", f"/split/{cut}") as resp:
                assert resp.status_code == 200
                out.append(b"".join([part async for part in resp.aiter_raw()]))
        return out

    bodies = run(server, body)
    assert all(b == BODY for b in bodies)
    assert server.connections == 1, "one keep-alive connection for all requests"


def test_content_length_close_and_no_body() -> None:
    server = RawServer()

    async def body(client: httpx.AsyncClient) -> list[bytes]:
        return [
            (await client.get("/length")).content,
            (await client.get("/close")).content,
            (await client.get("/empty")).content,
            (await client.get("/length")).content,
        ]

    assert run(server, body) == [b"hello", b"until eof", b"", b"hello"]


def test_connection_cut_mid_chunk_is_a_protocol_error() -> None:
    async def body(client: httpx.AsyncClient) -> None:
        async with client.stream("GET", "/cut") as resp:
            async for _ in resp.aiter_raw():
                pass

    with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
        run(RawServer(), body)


def test_server_closing_an_idle_connection_is_not_an_error() -> None:
    server = RawServer()

    async def body(client: httpx.AsyncClient) -> list[bytes]:
        first = (await client.get("/idle-close")).content
        await asyncio.sleep(0.1)
        return [first, (await client.get("/length")).content]

    assert run(server, body) == [b"ok", b"hello"]
    assert server.connections == 2


def test_at_most_max_connections() -> None:
    server = RawServer()

    async def body(client: httpx.AsyncClient) -> list[int]:
        resps = await asyncio.gather(*(client.get("/slow") for _ in range(5)))
        return [r.status_code for r in resps]

    assert run(server, body) == [200] * 5
    assert server.max_open == 2


def test_refused_connection_is_a_connect_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once the socket is closed

    async def go() -> None:
        transport = StreamingTransport(max_connections=1)
        async with httpx.AsyncClient(transport=transport) as client:
            await client.get(f"http://127.0.0.1:{port}/")

    with pytest.raises(httpx.ConnectError):
        asyncio.run(go())
