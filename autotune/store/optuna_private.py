"""Optuna's private attributes, used here and nowhere else (read in Optuna 5.0).

Each one says why the public API does not serve. An Optuna release that renames one
breaks this file only, and tests/test_optuna_private.py says which.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import optuna

# The protocol every artifact store implements (our database store too): optuna.artifacts
# exports the stores and upload/download, not the protocol a function would be typed with.
from optuna.artifacts._protocol import ArtifactStore
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial

if TYPE_CHECKING:
    from optuna.trial import Trial

__all__ = ["ArtifactStore", "rdb", "stale_trial_ids", "storage", "study_id", "trial_id"]


def storage(study: optuna.Study) -> BaseStorage:
    """The study's storage. `Study` keeps it private, but a worker must read one trial's
    current state (another worker may have failed it) without loading every trial, and
    write attributes of trials it did not `ask` for (a dead worker's)."""
    return study._storage


def rdb(study: optuna.Study) -> RDBStorage | None:
    """The study's database, unwrapped from Optuna's cache (`_CachedStorage._backend`): the
    proposal lock and the artifact table need its SQLAlchemy engine. None in memory."""
    db = getattr(study._storage, "_backend", study._storage)
    return db if isinstance(db, RDBStorage) else None


def study_id(study: optuna.Study) -> int:
    """The study's id: storage methods are keyed by it, and `Study` has no public one."""
    return study._study_id


def trial_id(trial: Trial | FrozenTrial) -> int:
    """The trial's storage id (`number` counts within a study; storage methods need the id,
    and neither `Trial` nor `FrozenTrial` exposes it publicly)."""
    return trial._trial_id


def stale_trial_ids(db: RDBStorage, study: optuna.Study) -> list[int]:
    """RUNNING trials whose heartbeat is older than the grace period. The public
    `fail_stale_trials` fails them at once; autotune first checks whether their owner is
    alive on this host, and requeues each config once."""
    return list(db._get_stale_trial_ids(study._study_id))
