"""Where a study lives: the Optuna storage (SQLite or PostgreSQL) and the trial artifacts.

    storage = open_storage(url, source="study.storage")       # RDBStorage, created on demand
    store = artifact_store(url, engine)                       # logs and unit files per trial

A SQLite file is opened with WAL and a schema lock, so several workers on one machine
share it; PostgreSQL serves several hosts. Artifacts go into the database for
PostgreSQL (every host sees them) and beside the SQLite file otherwise.
"""

from autotune.store.artifacts import artifact_store, upload_trial
from autotune.store.storage import open_storage, redact

__all__ = ["artifact_store", "open_storage", "redact", "upload_trial"]
