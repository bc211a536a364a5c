"""A loopback port nothing listens on, for a test server to take."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port the kernel just gave out on 127.0.0.1 (free until someone binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
