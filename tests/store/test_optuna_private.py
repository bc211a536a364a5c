"""Every private Optuna attribute autotune uses, against the installed Optuna: a release
that renames one fails here, by name, before a study does."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.storages import RDBStorage

from autotune.store import optuna_private


def test_in_memory_study(tmp_path: Path) -> None:
    study = optuna.create_study()
    trial = study.ask()
    assert optuna_private.rdb(study) is None
    tid = optuna_private.trial_id(trial)
    db = optuna_private.storage(study)
    assert db.get_trial(tid).number == trial.number
    assert db.get_trial_id_from_study_id_trial_number(optuna_private.study_id(study), 0) == tid
    assert optuna_private.trial_id(study.trials[0]) == tid


def test_sqlite_study_unwraps_the_cache_and_finds_stale_trials(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    storage = RDBStorage(url, heartbeat_interval=60, grace_period=120)
    study = optuna.create_study(study_name="s", storage=storage)
    trial = study.ask()
    db = optuna_private.rdb(study)
    assert isinstance(db, RDBStorage) and db.engine is not None
    # No heartbeat recorded yet: not stale (Optuna counts only trials that beat once).
    assert optuna_private.stale_trial_ids(db, study) == []
    storage.record_heartbeat(optuna_private.trial_id(trial))
    assert optuna_private.stale_trial_ids(db, study) == []


def test_the_artifact_store_protocol_is_what_our_stores_satisfy(tmp_path: Path) -> None:
    from optuna.artifacts import FileSystemArtifactStore

    store: optuna_private.ArtifactStore = FileSystemArtifactStore(str(tmp_path))
    assert hasattr(store, "open_reader") and hasattr(store, "write")
