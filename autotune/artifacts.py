"""Per-trial files beside the study DB: the deployed unit, the benchmark JSON, the server log.

Stored with Optuna's FileSystemArtifactStore, so optuna-dashboard shows them
on each trial when started with `--artifact-dir` (`autotune dashboard` does).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact

from autotune.log import get

log = get("autotune.artifacts")


def artifact_dir(storage_url: str) -> Path:
    """`<db name>-artifacts/` beside a SQLite file; `./autotune-artifacts` for a server DB."""
    parsed = urlparse(storage_url)
    if parsed.scheme.startswith("sqlite") and parsed.path not in ("", "/", "/:memory:"):
        db = Path(parsed.path[1:]) if storage_url.startswith("sqlite:///") else Path(parsed.path)
        return db.parent / f"{db.stem}-artifacts"
    return Path("autotune-artifacts")


def upload_trial(
    storage_url: str,
    trial: optuna.Trial | optuna.trial.FrozenTrial,
    *,
    unit_text: str,
    server_log: str,
    result: dict[str, Any],
) -> None:
    """Attach the trial's unit, server log and measurements. Never fails the trial."""
    base = artifact_dir(storage_url)
    try:
        base.mkdir(parents=True, exist_ok=True)
        store = FileSystemArtifactStore(str(base))
        with tempfile.TemporaryDirectory() as tmp:
            files = {
                "unit.service": (unit_text, "text/plain; charset=utf-8"),
                "server.log": (server_log, "text/plain; charset=utf-8"),
                "benchmark.json": (
                    json.dumps(result, indent=2, default=str),
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
    except OSError as exc:
        log.warning("could not store the trial's files", trial=trial.number, error=str(exc))
