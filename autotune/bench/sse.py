"""Incremental Server-Sent Events decoder: network reads in, event payloads out.

An event may be split across reads anywhere (even inside `\\r\\n`), and one read
often carries several events, so the decoder keeps the unfinished tail.
"""

from __future__ import annotations


class SSEDecoder:
    """Turn a byte stream into the `data` payloads of complete events.

    Only `data:` fields matter to the load generator; `event:`, `id:`, `retry:`
    and comments are skipped. A payload spread over several `data:` lines is
    joined with `\\n` as the SSE specification says.
    """

    __slots__ = ("_buf", "_data", "_held_cr")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []
        self._held_cr = False

    def feed(self, chunk: bytes) -> list[bytes]:
        """Decode one network read; return the payloads of the events it completed."""
        if self._held_cr:
            chunk = b"\r" + chunk
            self._held_cr = False
        if b"\r" in chunk:
            # A trailing \r may be the first half of \r\n: decide with the next read.
            if chunk.endswith(b"\r"):
                chunk = chunk[:-1]
                self._held_cr = True
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + chunk if self._buf else chunk
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        out: list[bytes] = []
        data = self._data
        for line in lines:
            if not line:
                if data:
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
            elif line.startswith(b"data:"):
                data.append(line[6:] if line[5:6] == b" " else line[5:])
        return out

    def close(self) -> list[bytes]:
        """End of stream: an event not closed by a blank line is dispatched anyway.

        The specification says to drop it; servers that omit the final blank line
        exist, and dropping their `[DONE]` would turn a good stream into an error.
        """
        tail = self.feed(b"\n\n") if (self._buf or self._data) else []
        self._held_cr = False
        return tail

    @property
    def pending(self) -> bool:
        """True if bytes of an unfinished event are buffered."""
        return bool(self._buf or self._data)
