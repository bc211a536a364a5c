"""One worker per local server: an exclusive lock on a file that names its holder.

A `flock` the kernel drops when the holder dies, so a killed worker never
leaves a stale lock. The lock is the server's, keyed on the address it serves
(`server_lock`): configs in one folder for several servers run side by side, two
configs for one server do not, wherever they live. (Workers of one study are welcome;
two on one server are not. A systemd host has its own lock: deploy/host_lock.py; the
study's proposals one at a time: store/storage.proposal_lock.)
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

from autotune.errors import AutotuneError

_LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "")


def server_key(base_url: str) -> str:
    """`host-port` of the address a local server answers on (loopback names as one)."""
    url = urlparse(base_url)
    host = url.hostname or ""
    port = url.port or (443 if url.scheme == "https" else 80)
    return f"{'127.0.0.1' if host in _LOOPBACK else host}-{port}"


def server_lock(base_url: str, what: str) -> ProcessLock:
    """The lock of the server at `base_url` on this machine, for this user."""
    folder = Path(tempfile.gettempdir()) / f"autotune-{os.getuid()}"
    return ProcessLock(folder / f"server-{server_key(base_url)}.lock", what)


class ProcessLock:
    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        """The server and the config, as the holder's lock file and a refusal name them."""
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "a+")  # noqa: SIM115 - held open for the daemon's life
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = _describe(f.read())
            f.close()
            raise AutotuneError(
                f"{self.what} is already driven by {holder} (lock {self.path}): "
                "one worker per server"
            ) from None
        f.seek(0)
        f.truncate()
        json.dump(
            {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time(),
             "what": self.what},
            f,
        )  # fmt: skip
        f.flush()
        self._file = f

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def __enter__(self) -> ProcessLock:
        self.acquire()
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.release()


def _describe(text: str) -> str:
    try:
        info = json.loads(text)
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["since"]))
        holder = f"pid {info['pid']} on {info['host']} since {since}"
        return f"{holder}, for {info['what']}" if info.get("what") else holder
    except (ValueError, KeyError, TypeError):
        return "another autotune process"
