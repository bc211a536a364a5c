"""One worker per local server: an exclusive lock on a file that names its holder.

A `flock` the kernel drops when the holder dies, so a killed worker never
leaves a stale lock. (Workers of one study are welcome; two on one server are
not. A systemd host has its own lock: deploy/lock.py.)
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO, Any

from autotune.errors import AutotuneError


class ProcessLock:
    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
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
        json.dump({"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}, f)
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
        return f"pid {info['pid']} on {info['host']} since {since}"
    except (ValueError, KeyError, TypeError):
        return "another autotune process"
