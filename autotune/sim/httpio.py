"""Just enough HTTP/1.1 for the simulator: keep-alive, Content-Length, chunked SSE.

The standard library has no asyncio HTTP server, and a dependency is not
worth it for a handful of endpoints; this is what a client sees from uvicorn.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from email.utils import formatdate
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Request Entity Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class BadRequest(Exception):
    """The bytes on the wire are not an HTTP request we can read; close after a 400."""


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return conn == "keep-alive"
        return conn != "close"


async def read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> Request | None:
    """The next request on a connection, or None when the client closed it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial.strip():
            raise BadRequest("connection closed inside the request head") from None
        return None
    except asyncio.LimitOverrunError:
        raise BadRequest("request head too large") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(f"bad request line {lines[0][:80]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise BadRequest(f"bad header line {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    body = b""
    if headers.get("expect", "").lower() == "100-continue":
        # curl asks before sending a body over 1 KB and would otherwise wait a second.
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    elif "content-length" in headers:
        try:
            n = int(headers["content-length"])
        except ValueError:
            raise BadRequest("bad Content-Length") from None
        if n < 0 or n > MAX_BODY_BYTES:
            raise BadRequest("Content-Length out of range")
        try:
            body = await reader.readexactly(n)
        except asyncio.IncompleteReadError:
            raise BadRequest("connection closed inside the body") from None
    url = urlsplit(target)
    return Request(method.upper(), url.path or "/", url.query, version, headers, body)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    try:
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # trailers are not used; one empty line
                return bytes(out)
            out += await reader.readexactly(size)
            await reader.readexactly(2)
            if len(out) > MAX_BODY_BYTES:
                raise BadRequest("body too large")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
        raise BadRequest("bad chunked body") from None


_date_cache: tuple[int, bytes] = (0, b"")


def _date() -> bytes:
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, formatdate(now, usegmt=True).encode())
    return _date_cache[1]


def response(
    status: int,
    body: bytes,
    content_type: str = "application/json",
    *,
    keep_alive: bool = True,
) -> bytes:
    head = (
        b"HTTP/1.1 %d %s\r\ndate: %s\r\nserver: uvicorn\r\ncontent-length: %d\r\n"
        b"content-type: %s\r\n%s\r\n"
        % (
            status,
            REASONS.get(status, "OK").encode(),
            _date(),
            len(body),
            content_type.encode(),
            b"" if keep_alive else b"connection: close\r\n",
        )
    )
    return head + body


def stream_head() -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ndate: %s\r\nserver: uvicorn\r\n"
        b"content-type: text/event-stream; charset=utf-8\r\n"
        b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n" % _date()
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
