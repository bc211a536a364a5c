"""The study database: SQLite on one host, PostgreSQL for several.

What the rest of autotune needs from it, in one place:
- open it (`open_storage`), with `${VAR}` in the URL taken from the environment
  and a database that cannot be reached as one line naming `study.storage`;
- never show its password (`redact`: logs, the study record, the report);
- `proposal_lock`: a short lock around "how many trials are left, propose the
  next" so that workers on several hosts never exceed `n_trials` and each
  proposal sees the others' running trials (an advisory lock in PostgreSQL, an
  flock beside a SQLite file);
- `wait_for_database`: a database that drops mid-study is waited out, like an
  SSH link.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlparse

from optuna.exceptions import StorageInternalError
from optuna.storages import RDBStorage
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from autotune.errors import AutotuneError, ConfigError
from autotune.log import get

log = get("autotune.store.storage")

#: What a database that went away raises, through SQLAlchemy or through Optuna.
DATABASE_ERRORS: tuple[type[Exception], ...] = (SQLAlchemyError, StorageInternalError)

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_KEY = "study.storage"


def scheme(url: str) -> str:
    """`sqlite` or `postgresql` (dialect only: `postgresql+psycopg` is `postgresql`)."""
    s = urlparse(url).scheme.split("+")[0]
    return "postgresql" if s == "postgres" else s


def is_sqlite(url: str) -> bool:
    return scheme(url) == "sqlite"


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL (None for in-memory or another database)."""
    parsed = urlparse(url)
    if not is_sqlite(url) or parsed.path in ("", "/", "/:memory:"):
        return None
    return Path(parsed.path[1:]) if url.startswith("sqlite:///") else Path(parsed.path)


def redact(url: str) -> str:
    """The URL as a person may see it: a password written in it shows as ***."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        # Not a URL SQLAlchemy reads: still never show what sits between `user:` and `@`.
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def expand(url: str, source: str | None = None) -> str:
    """Fill `${VAR}` from the environment and pick psycopg 3 for PostgreSQL."""

    def value(m: re.Match[str]) -> str:
        got = os.environ.get(m.group(1))
        if got is None:
            raise ConfigError(source, _KEY, f"environment variable {m.group(1)} is not set")
        return got

    url = _VAR.sub(value, url)
    if scheme(url) == "postgresql":
        # SQLAlchemy's default PostgreSQL driver is psycopg2; autotune[postgres] installs psycopg 3.
        url = re.sub(r"^postgres(ql)?(\+psycopg2?)?://", "postgresql+psycopg://", url)
        if importlib.util.find_spec("psycopg") is None:
            raise ConfigError(
                source,
                _KEY,
                "PostgreSQL needs psycopg 3: pip install 'autotune[postgres]'",
            )
    return url


def open_storage(
    url: str,
    *,
    source: str | None = None,
    create: bool = True,
    heartbeat_interval: int | None = 60,
    grace_period: int | None = 300,
) -> RDBStorage:
    """Open the study database; with `create=False`, only read an existing one.

    A database that cannot be reached or refuses us is a ConfigError naming
    study.storage (exit 2), before anything is deployed.
    """
    real = expand(url, source)
    engine_kwargs: dict[str, Any] = {}
    db = sqlite_file(real)
    if is_sqlite(real):
        if not create and db is not None and not db.is_file():
            raise AutotuneError(f"no study database at {db} (run `autotune start` first)")
        # A reader (the dashboard, `autotune status`) may hold the lock for a moment.
        engine_kwargs["connect_args"] = {"timeout": 30}
    else:
        engine_kwargs["pool_pre_ping"] = True  # a restarted server leaves dead pooled connections
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
    try:
        with _schema_lock(real, create):
            storage = RDBStorage(
                real,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=heartbeat_interval if create else None,
                grace_period=grace_period if create else None,
                skip_compatibility_check=not create,
                skip_table_creation=not create,
            )
    except DATABASE_ERRORS as exc:
        raise ConfigError(source, _KEY, f"cannot open {redact(url)}: {_first_line(exc)}") from None
    except Exception as exc:  # a malformed URL, an unknown dialect
        raise ConfigError(source, _KEY, f"cannot open {redact(url)}: {_first_line(exc)}") from None
    if create and db is not None:
        _use_wal(storage)
    return storage


@contextlib.contextmanager
def _schema_lock(url: str, create: bool) -> Iterator[None]:
    """Workers starting together on an empty PostgreSQL database would each create Optuna's
    tables, and all but one fail on a duplicate type: one at a time."""
    if not create or is_sqlite(url):
        yield
        return
    engine = create_engine(url, connect_args={"connect_timeout": 10})
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _lock_key("\0schema")})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _lock_key("\0schema")})
    finally:
        engine.dispose()


def _first_line(exc: BaseException) -> str:
    """The driver's own words (`Connection refused`), not the wrappers around them: Optuna's
    `An exception is raised during the commit`, SQLAlchemy's error with its .orig."""
    cause: BaseException | None = exc
    while cause is not None:
        exc = cause
        orig = getattr(exc, "orig", None)
        if isinstance(orig, BaseException):
            exc = orig
            break
        cause = exc.__cause__ or exc.__context__
    words = str(exc).strip()
    return words.splitlines()[0] if words else type(exc).__name__


def _use_wal(storage: RDBStorage) -> None:
    """Switch a SQLite study DB to write-ahead logging, once: the mode is kept in the file.

    In the default rollback-journal mode a reader (optuna-dashboard polling every
    few seconds, `autotune status`) blocks the daemon's commit until it finishes;
    in WAL mode readers and the writer never wait for each other.
    """
    try:
        with storage.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")
    except SQLAlchemyError as exc:  # e.g. a read-only file: the busy timeout still applies
        log.warning("study DB stays in rollback-journal mode", error=str(exc))


def reachable(storage: RDBStorage) -> str | None:
    """None when the database answers, else why not (one line)."""
    try:
        with storage.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        return _first_line(exc)
    return None


def wait_for_database(
    storage: RDBStorage,
    error: BaseException,
    *,
    timeout: float,
    stopping: Callable[[], bool] = lambda: False,
) -> None:
    """The database went away mid-study: wait with backoff until it answers, or give up."""
    give_up = time.monotonic() + timeout
    delay = 2.0
    log.error("the study database does not answer: waiting for it", error=_first_line(error))
    while True:
        if stopping():
            raise AutotuneError(f"stopped while the study database was down: {_first_line(error)}")
        if time.monotonic() > give_up:
            raise AutotuneError(
                f"the study database has not answered for {timeout:.0f} s "
                f"(target.infra_timeout): {_first_line(error)}"
            )
        time.sleep(delay)
        why = reachable(storage)
        if why is None:
            log.info("the study database answers again: continuing")
            return
        log.warning("study database still down", retry_in_s=round(delay), error=why)
        delay = min(delay * 2, 30.0)


# -- one proposal at a time, across every worker of a study ------------------------------
def _lock_key(study: str) -> int:
    """A signed 64-bit key for PostgreSQL's advisory locks, the same on every host."""
    digest = hashlib.sha256(f"autotune/{study}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def lock_file(url: str, study: str) -> Path:
    """Beside a SQLite file (every worker of a SQLite study runs on its host)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in study)
    db = sqlite_file(url)
    if db is not None:
        return db.parent / f".{db.name}.{safe}.lock"
    digest = hashlib.sha256(f"{url}\0{study}".encode()).hexdigest()[:16]
    return Path.home() / ".cache" / "autotune" / f"{safe}-{digest}.lock"


@contextlib.contextmanager
def proposal_lock(storage: RDBStorage, study: str) -> Iterator[None]:
    """Held while a worker counts what is left and proposes: milliseconds, not a trial.

    PostgreSQL: a transaction-level advisory lock on a connection of our own,
    released when the transaction ends or the connection dies with its worker.
    SQLite: an flock the kernel drops when the holder dies.
    """
    url = storage.engine.url.render_as_string(hide_password=False)
    if is_sqlite(url):
        f = _locked(lock_file(url, study))
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()
        return
    with storage.engine.connect() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _lock_key(study)})
        try:
            yield
        finally:
            conn.rollback()  # ends the transaction, which releases the lock


def _locked(path: Path) -> IO[str]:
    """Open and flock `path`; a file removed between the open and the lock (a worker
    leaving, `remove_lock_file`) is let go and the new one taken."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        f = open(path, "a")  # noqa: SIM115 - returned locked to the caller
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            if os.fstat(f.fileno()).st_ino == os.stat(path).st_ino:
                return f
        except FileNotFoundError:
            pass
        f.close()


def remove_lock_file(url: str, study: str) -> None:
    """On a clean exit: remove a SQLite study's lock file unless another worker holds it."""
    path = lock_file(expand(url), study) if is_sqlite(url) else None
    if path is None or not path.exists():
        return
    try:
        with open(path, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.fstat(f.fileno()).st_ino == os.stat(path).st_ino:
                path.unlink()
    except (BlockingIOError, FileNotFoundError):
        pass  # another worker is proposing, or has removed it already
