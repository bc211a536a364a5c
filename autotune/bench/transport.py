"""A lean HTTP/1.1 keep-alive transport for httpx, built for many long SSE streams.

httpx's default transport (httpcore over anyio over asyncio) costs ~220 µs of
CPU per network read on a server-class core, so a load generator using it
spends most of its core on the HTTP stack when every chunk of every stream
arrives on its own (as it does from a server that emits one decode step at a
time); its pool also scans every connection for every queued request, O(C^2)
per request at C connections. This transport speaks plain HTTP/1.1 over asyncio
streams: one idle-connection list per origin, a body iterator that de-chunks
whatever each socket read brings and hands it on at once. Everything above it
(`httpx.AsyncClient`, `Response`, `aiter_raw`, exceptions) is stock httpx.

Not supported, because the load generator never needs them: HTTP/2, proxies,
100-continue, trailers, request bodies that are not already in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator

import httpx

READ_BYTES = 65536
MAX_HEAD_BYTES = 65536


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @property
    def usable(self) -> bool:
        # A connection the server closed while idle has EOF or pending bytes.
        # (StreamReader has no public way to peek at its buffer.)
        return (
            not self.writer.is_closing()
            and not self.reader.at_eof()
            and not len(self.reader._buffer)
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class StreamingTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 with keep-alive and at most `max_connections` open connections."""

    def __init__(
        self,
        *,
        max_connections: int,
        tls: ssl.SSLContext | None = None,
        connect_timeout_s: float | None = 30.0,
    ) -> None:
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._tls = tls
        self._connect_timeout_s = connect_timeout_s

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts = request.extensions.get("timeout", {})
        await self._slots.acquire()
        try:
            origin = (request.url.scheme, request.url.host, _port(request.url))
            conn, reused = await self._checkout(origin, timeouts.get("connect"))
            try:
                status, headers, keep_alive = await self._exchange(
                    conn, request, timeouts.get("read")
                )
            except httpx.TransportError:
                conn.close()
                if not reused:
                    raise
                # The server closed a keep-alive connection just as we reused it.
                conn, _ = await self._checkout(origin, timeouts.get("connect"), fresh=True)
                try:
                    status, headers, keep_alive = await self._exchange(
                        conn, request, timeouts.get("read")
                    )
                except BaseException:
                    conn.close()
                    raise
            except BaseException:
                conn.close()
                raise
        except BaseException:
            self._slots.release()
            raise
        body = _Body(self, origin, conn, status, headers, keep_alive, timeouts.get("read"))
        return httpx.Response(
            status, headers=headers, stream=body, extensions={"http_version": b"HTTP/1.1"}
        )

    async def _checkout(
        self, origin: tuple[str, str, int], timeout: float | None, fresh: bool = False
    ) -> tuple[_Conn, bool]:
        idle = self._idle.get(origin)
        while idle and not fresh:
            conn = idle.pop()
            if conn.usable:
                return conn, True
            conn.close()
        scheme, host, port = origin
        tls = None
        if scheme == "https":
            tls = self._tls or ssl.create_default_context()
        try:
            async with asyncio.timeout(timeout):
                reader, writer = await asyncio.open_connection(
                    host, port, ssl=tls, limit=READ_BYTES * 4
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"connect to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from None
        return _Conn(reader, writer), False

    async def _exchange(
        self, conn: _Conn, request: httpx.Request, timeout: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], bool]:
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = await request.aread()
        head = [b"%s %s HTTP/1.1\r\n" % (request.method.encode(), request.url.raw_path)]
        head += [b"%s: %s\r\n" % (k, v) for k, v in request.headers.raw]
        if body and "content-length" not in request.headers:
            head.append(b"Content-Length: %d\r\n" % len(body))
        head.append(b"\r\n")
        try:
            conn.writer.write(b"".join(head) + body)
            async with asyncio.timeout(timeout):
                await conn.writer.drain()
                raw = await conn.reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            raise httpx.ReadTimeout("no response head in time") from None
        except asyncio.IncompleteReadError as exc:
            raise httpx.RemoteProtocolError(
                "server closed the connection without a response"
                if not exc.partial
                else "response head cut short"
            ) from None
        except asyncio.LimitOverrunError:
            raise httpx.RemoteProtocolError("response head too long") from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from None
        lines = raw[:-4].split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise httpx.RemoteProtocolError(f"bad status line: {lines[0][:80]!r}")
        headers: list[tuple[bytes, bytes]] = []
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise httpx.RemoteProtocolError(f"bad header line: {line[:80]!r}")
            headers.append((name.strip(), value.strip()))
        keep_alive = parts[0] == b"HTTP/1.1" and not any(
            k.lower() == b"connection" and v.lower() == b"close" for k, v in headers
        )
        return int(parts[1]), headers, keep_alive

    def _checkin(self, origin: tuple[str, str, int], conn: _Conn | None) -> None:
        if conn is not None:
            self._idle.setdefault(origin, []).append(conn)
        self._slots.release()

    async def aclose(self) -> None:
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()


class _Body(httpx.AsyncByteStream):
    """A response body, de-chunked read by read; returns the connection when done."""

    def __init__(
        self,
        transport: StreamingTransport,
        origin: tuple[str, str, int],
        conn: _Conn,
        status: int,
        headers: list[tuple[bytes, bytes]],
        keep_alive: bool,
        timeout: float | None,
    ) -> None:
        self._transport = transport
        self._origin = origin
        self._conn: _Conn | None = conn
        self._keep_alive = keep_alive
        self._timeout = timeout
        self._complete = False
        names = {k.lower(): v for k, v in headers}
        te = names.get(b"transfer-encoding", b"").lower()
        self._chunked = b"chunked" in te
        length = names.get(b"content-length")
        if status in (204, 304) or 100 <= status < 200:
            self._length: int | None = 0
        elif self._chunked:
            self._length = None
        elif length is not None and length.isdigit():
            self._length = int(length)
        else:
            self._length = None  # until the server closes
            self._keep_alive = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        if conn is None:
            return
        try:
            if self._chunked:
                async for part in self._dechunk(conn):
                    yield part
            elif self._length is not None:
                left = self._length
                while left > 0:
                    data = await self._read(conn, min(left, READ_BYTES))
                    if not data:
                        raise httpx.RemoteProtocolError(
                            f"connection closed with {left} body bytes missing"
                        )
                    left -= len(data)
                    yield data
            else:
                while data := await self._read(conn, READ_BYTES):
                    yield data
            self._complete = True
        finally:
            if not self._complete:
                self._keep_alive = False

    async def _dechunk(self, conn: _Conn) -> AsyncIterator[bytes]:
        buf = b""
        need = 0  # body bytes left in the current chunk
        while True:
            data = await self._read(conn, READ_BYTES)
            if not data:
                raise httpx.RemoteProtocolError(
                    "peer closed connection without sending complete message body: "
                    "incomplete chunked read"
                )
            buf = buf + data if buf else data
            out: list[bytes] = []
            pos = 0
            while True:
                if need > 0:
                    take = min(need, len(buf) - pos)
                    if take <= 0:
                        break
                    out.append(buf[pos : pos + take])
                    pos += take
                    need -= take
                    if need:
                        break
                    need = -2  # the CRLF after the chunk data
                if need == -2:
                    if len(buf) - pos < 2:
                        break
                    if buf[pos : pos + 2] != b"\r\n":
                        raise httpx.RemoteProtocolError("missing CRLF after chunk data")
                    pos += 2
                    need = 0
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    if len(buf) - pos > 1024:
                        raise httpx.RemoteProtocolError("chunk size line too long")
                    break
                size_field = buf[pos:end].split(b";", 1)[0].strip()
                try:
                    size = int(size_field, 16)
                except ValueError:
                    raise httpx.RemoteProtocolError(f"bad chunk size {size_field[:20]!r}") from None
                pos = end + 2
                if size == 0:
                    # Last chunk; skip (rare) trailers up to the blank line.
                    rest = buf[pos:]
                    while not (rest.startswith(b"\r\n") or b"\r\n\r\n" in rest):
                        more = await self._read(conn, READ_BYTES)
                        if not more:
                            raise httpx.RemoteProtocolError("body ended inside its trailer")
                        rest += more
                    if out:
                        yield b"".join(out)
                    return
                need = size
            buf = buf[pos:]
            if out:
                yield out[0] if len(out) == 1 else b"".join(out)

    async def _read(self, conn: _Conn, n: int) -> bytes:
        try:
            if conn.reader._buffer:
                # Bytes already buffered: read() would return without ever
                # suspending, and a stream that is always ahead would keep the
                # event loop (other streams, the stopping rule) waiting.
                await asyncio.sleep(0)
            if self._timeout is None:
                return await conn.reader.read(n)
            async with asyncio.timeout(self._timeout):
                return await conn.reader.read(n)
        except TimeoutError:
            raise httpx.ReadTimeout("no body bytes in time") from None
        except OSError as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__) from None

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._complete and self._keep_alive:
            self._transport._checkin(self._origin, conn)
        else:
            conn.close()
            self._transport._checkin(self._origin, None)


def _port(url: httpx.URL) -> int:
    if url.port is not None:
        return url.port
    return 443 if url.scheme == "https" else 80
