"""Optuna's private attributes, used here and nowhere else (read in Optuna 5.0).

Each one says why the public API does not serve. An Optuna release that renames one
breaks this file only, and tests/store/test_optuna_private.py says which.
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

__all__ = [
    "ArtifactStore",
    "forget_trial",
    "heartbeat_ages",
    "rdb",
    "stale_trial_ids",
    "storage",
    "study_id",
    "trial_id",
]


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


def heartbeat_ages(study: optuna.Study) -> dict[int, float]:
    """Seconds since each RUNNING trial's last heartbeat, by trial number, on the database's
    own clock (the workers' clocks may differ). Optuna reads the heartbeat table only to
    find stale trials, and only from a worker that is starting: `status` must tell a live
    worker from a dead one without failing anything."""
    from optuna.storages._rdb import models
    from optuna.trial import TrialState
    from sqlalchemy import DateTime, cast, func

    db = rdb(study)
    if db is None:
        return {}
    session = db.scoped_session()
    try:
        now_sql = func.current_timestamp()
        if db.engine.dialect.name != "sqlite":
            # The column has no time zone: PostgreSQL stored now() in the session's zone.
            now_sql = cast(now_sql, DateTime)
        now = session.query(now_sql).scalar()
        rows = (
            session.query(models.TrialModel.number, models.TrialHeartbeatModel.heartbeat)
            .join(models.TrialHeartbeatModel)
            .filter(
                models.TrialModel.study_id == study._study_id,
                models.TrialModel.state == TrialState.RUNNING,
            )
            .all()
        )
    finally:
        session.close()
    return {number: _seconds_between(beat, now) for number, beat in rows}


def _seconds_between(earlier: object, later: object) -> float:
    """Both as the database wrote them: naive datetimes, or SQLite's text."""
    import datetime as dt

    def naive(value: object) -> dt.datetime:
        if isinstance(value, str):
            value = dt.datetime.fromisoformat(value)
        assert isinstance(value, dt.datetime)
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value

    return max(0.0, (naive(later) - naive(earlier)).total_seconds())


def forget_trial(study: optuna.Study, trial: FrozenTrial, record: dict[str, object]) -> None:
    """Turn a finished trial into FAIL with a `forgotten` user attribute holding `record`.

    Optuna never changes a finished trial (`_check_trial_is_updatable` refuses, and its cache
    never reads one again), yet a result recorded wrongly (a host's failure taken for the
    config's) must stop counting: FAIL trials count against no budget, teach no sampler, and
    stay in the study, visible as such. Written to the database's own tables; a process that
    has the study open keeps its cached copy, so `autotune forget` refuses a running study."""
    import json

    from optuna.storages._rdb import models
    from optuna.trial import TrialState

    db = rdb(study)
    if db is None:
        raise RuntimeError("forgetting a trial needs the study's database")
    session = db.scoped_session()
    try:
        row = session.get(models.TrialModel, trial_id(trial))
        if row is None:
            raise RuntimeError(f"trial {trial.number} is not in the database")
        row.state = TrialState.FAIL
        # Its values live on in `record`: a FAIL trial with values would show as a result.
        session.query(models.TrialValueModel).filter(
            models.TrialValueModel.trial_id == row.trial_id
        ).delete()
        attr = models.TrialUserAttributeModel.find_by_trial_and_key(row, "forgotten", session)
        if attr is None:
            attr = models.TrialUserAttributeModel(trial_id=row.trial_id, key="forgotten")
            session.add(attr)
        attr.value_json = json.dumps(record)
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
