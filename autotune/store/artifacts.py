"""Per-trial files: the deployed unit, the benchmark JSON, the server log.

Stored through Optuna's artifact API, so optuna-dashboard shows them on each
trial (`autotune dashboard` hands it the store). Where they live depends on
who must reach them:
- a SQLite study runs on one host: files in `<db name>-artifacts/` beside the
  database (Optuna's FileSystemArtifactStore; `optuna-dashboard --artifact-dir`
  reads them too);
- a PostgreSQL study has workers on several hosts, and the one place every
  worker and the dashboard already reach is the database: a table
  `autotune_artifacts` in it (`DatabaseArtifactStore`). No shared filesystem,
  no object store, no extra credentials.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.artifacts.exceptions import ArtifactNotFound
from sqlalchemy import Column, LargeBinary, MetaData, String, Table, delete, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from autotune.log import get
from autotune.store.optuna_private import ArtifactStore
from autotune.store.storage import DATABASE_ERRORS, sqlite_file
from autotune.unit import secrets

log = get("autotune.store.artifacts")

TABLE = "autotune_artifacts"
_metadata = MetaData()
_table = Table(
    TABLE,
    _metadata,
    Column("artifact_id", String(255), primary_key=True),
    Column("body", LargeBinary, nullable=False),
)


def artifact_dir(storage_url: str) -> Path:
    """`<db name>-artifacts/` beside a SQLite file; `./autotune-artifacts` for a server DB
    (where only a local-process server's log and pidfile go)."""
    db = sqlite_file(storage_url)
    if db is not None:
        return db.parent / f"{db.stem}-artifacts"
    return Path("autotune-artifacts")


class DatabaseArtifactStore:
    """Optuna's ArtifactStore protocol on a table of the study's own database."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        # Another worker may create it at the same moment; anything else shows on first use.
        with contextlib.suppress(SQLAlchemyError):
            _metadata.create_all(engine, checkfirst=True)

    def open_reader(self, artifact_id: str) -> BinaryIO:
        with self._engine.connect() as conn:
            row = conn.execute(
                select(_table.c.body).where(_table.c.artifact_id == artifact_id)
            ).first()
        if row is None:
            raise ArtifactNotFound(f"no artifact {artifact_id} in table {TABLE}")
        return io.BytesIO(bytes(row[0]))

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        with self._engine.begin() as conn:
            conn.execute(insert(_table).values(artifact_id=artifact_id, body=content_body.read()))

    def remove(self, artifact_id: str) -> None:
        with self._engine.begin() as conn:
            gone = conn.execute(delete(_table).where(_table.c.artifact_id == artifact_id))
        if gone.rowcount == 0:
            raise ArtifactNotFound(f"no artifact {artifact_id} in table {TABLE}")


def artifact_store(storage_url: str, engine: Engine | None) -> ArtifactStore | None:
    """Where this study's trial files go (and are read from); None if there is no place."""
    if sqlite_file(storage_url) is not None:
        return _Files(artifact_dir(storage_url))
    if engine is not None and engine.dialect.name != "sqlite":
        return DatabaseArtifactStore(engine)
    return None


class _Files(FileSystemArtifactStore):
    """A file store whose folder appears with its first file (a reader creates nothing)."""

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        self._base_path.mkdir(parents=True, exist_ok=True)
        super().write(artifact_id, content_body)


def upload_trial(
    store: ArtifactStore | None,
    trial: optuna.Trial | optuna.trial.FrozenTrial,
    *,
    unit_text: str,
    server_log: str,
    result: dict[str, Any],
) -> None:
    """Attach the trial's unit, server log and measurements, the secrets masked. Never fails
    the trial."""
    if store is None:
        return
    try:
        with tempfile.TemporaryDirectory() as tmp:
            files = {
                "unit.service": (secrets.text(unit_text), "text/plain; charset=utf-8"),
                "server.log": (secrets.text(server_log), "text/plain; charset=utf-8"),
                "benchmark.json": (
                    json.dumps(secrets.value(result), indent=2, default=str),
                    "application/json; charset=utf-8",
                ),
            }
            for name, (text, mimetype) in files.items():
                path = Path(tmp) / f"trial-{trial.number}-{name}"
                path.write_text(text)
                upload_artifact(
                    artifact_store=store,
                    file_path=str(path),
                    study_or_trial=trial,
                    mimetype=mimetype,
                )
    except (OSError, *DATABASE_ERRORS) as exc:
        log.warning("could not store the trial's files", trial=trial.number, error=str(exc))
