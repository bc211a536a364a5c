"""One daemon per study: an exclusive lock that names its holder.

The lock is a `flock` on a file derived from the storage URL and the study
name (beside a SQLite database, else under ~/.cache/autotune). The kernel
drops it when the holder dies, so a killed daemon never leaves a stale lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import time
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

from autotune.errors import AutotuneError


def lock_path(storage_url: str, study: str) -> Path:
    parsed = urlparse(storage_url)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in study)
    if parsed.scheme.startswith("sqlite") and parsed.path not in ("", "/", "/:memory:"):
        db = Path(parsed.path[1:]) if storage_url.startswith("sqlite:///") else Path(parsed.path)
        return db.parent / f".{db.name}.{safe}.lock"
    digest = hashlib.sha256(f"{storage_url}\0{study}".encode()).hexdigest()[:16]
    return Path.home() / ".cache" / "autotune" / f"{safe}-{digest}.lock"


class StudyLock:
    def __init__(self, storage_url: str, study: str) -> None:
        self.path = lock_path(storage_url, study)
        self.study = study
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
                f"study {self.study!r} is already being run by {holder} (lock {self.path})"
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

    def __enter__(self) -> StudyLock:
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
