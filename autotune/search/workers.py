"""Which worker runs which trial, and whether it is still alive: the owner a trial records,
its heartbeat and status line, and the recovery of trials whose worker died."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.storages import RDBStorage
from optuna.trial import FrozenTrial, TrialState

from autotune.config import Config
from autotune.log import get
from autotune.search import records
from autotune.store import optuna_private

log = get("autotune.search.study")


def running_trials(study: optuna.Study) -> list[FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))


def rdb(study: optuna.Study) -> RDBStorage | None:
    """The study's database (Optuna wraps it in a cache); None for an in-memory study."""
    return optuna_private.rdb(study)


class Repeating:
    """Calls `action` at once, then every `interval` seconds from a thread, while the block runs.

    For the signs of life other workers judge this one by (a trial's heartbeat, the
    finalists' claim). A failed call is logged, never raised: a missed beat must not
    stop the work it vouches for (a database away for a moment, say).
    """

    def __init__(self, interval: float, action: Callable[[], None], what: str) -> None:
        self._interval, self._action, self._what = interval, action, what
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _call(self) -> None:
        try:
            self._action()
        except Exception as exc:
            log.warning(f"{self._what} failed", error=str(exc))

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._call()

    def __enter__(self) -> Repeating:
        self._call()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def heartbeat(study: optuna.Study, trial: optuna.Trial) -> contextlib.AbstractContextManager[Any]:
    """The running trial's heartbeat, so that other workers can tell it is alive.

    Optuna only beats inside `study.optimize`; autotune drives ask/tell itself.
    """
    db = rdb(study)
    if db is None or not db.heartbeat_interval:
        return contextlib.nullcontext()
    trial_id = optuna_private.trial_id(trial)
    return Repeating(db.heartbeat_interval, lambda: db.record_heartbeat(trial_id), "heartbeat")


@dataclass(frozen=True)
class Liveness:
    """A RUNNING trial's worker as the database last heard from it."""

    trial: int
    worker: str  # host/pid, or the worker's name
    age_s: float | None  # since its last heartbeat; None before the first
    stale: bool  # no heartbeat for two intervals: the worker is gone

    def sentence(self) -> str:
        if self.age_s is None:
            return f"trial {self.trial} ({self.worker}): no heartbeat yet"
        seen = time.strftime("%H:%M:%S", time.localtime(time.time() - self.age_s))
        if self.stale:
            return (
                f"trial {self.trial} ({self.worker}): STALE, last seen {seen} "
                f"({_age(self.age_s)} ago); its worker is gone: autotune start resumes it"
            )
        return f"trial {self.trial} ({self.worker}): alive, seen {_age(self.age_s)} ago"


def liveness(study: optuna.Study, cfg: Config) -> list[Liveness]:
    """Each RUNNING trial's worker: alive, or gone (stale) with when it was last seen."""
    ages = optuna_private.heartbeat_ages(study)
    interval = max(1, cfg.study.heartbeat_grace // 5)  # as open_study asks the storage
    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        o = t.user_attrs.get(records.OWNER) or {}
        who = o.get("worker") or f"{o.get('host', '?')}/{o.get('pid', '?')}"
        age = ages.get(t.number)
        # On its own host a worker's process is asked directly: a killed one is gone now,
        # not after two missed beats.
        gone = owner_gone(t.user_attrs) or (age is not None and age > 2 * interval + 1)
        out.append(Liveness(t.number, who, age, gone))
    return out


def _age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


#: How often a running trial's status line is written to the study (for `autotune status`).
PROGRESS_EVERY_S = 5.0


def progress_record(
    trial: optuna.Trial, text: Callable[[], str]
) -> contextlib.AbstractContextManager[Any]:
    """Keep the running trial's `progress` attribute at the worker's status line, so that
    `autotune status`, from anywhere, shows what the worker's terminal shows."""
    last = [""]

    def write() -> None:
        now = text()
        if now and now != last[0]:
            trial.set_user_attr(records.PROGRESS, now)
            last[0] = now

    return Repeating(PROGRESS_EVERY_S, write, "progress record")


def owner(worker: str | None = None) -> dict[str, Any]:
    who: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(), "boot_id": boot_id()}
    if worker is not None:
        who["worker"] = worker
    return who


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def owner_gone(attrs: Mapping[str, Any]) -> bool:
    o = attrs.get(records.OWNER)
    if not isinstance(o, dict) or o.get("host") != socket.gethostname():
        return False  # another host's trial: only its own daemon (or a heartbeat) may judge it
    if o.get("boot_id") != boot_id():
        return True
    pid = o.get("pid")
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def recover_stale(study: optuna.Study) -> list[int]:
    """Fail RUNNING trials whose owner is gone and enqueue their params again, once.

    Owners on this host are judged by pid and boot id at once; trials of other
    hosts by their heartbeat (stale after the storage's grace period).
    """
    recovered = []
    running = running_trials(study)
    if not running:
        return []
    stale_ids: set[int] = set()
    db = rdb(study)
    if db is not None and db.heartbeat_interval:
        stale_ids = set(optuna_private.stale_trial_ids(db, study))
    for t in running:
        tid = optuna_private.trial_id(t)
        if not (owner_gone(t.user_attrs) or tid in stale_ids):
            continue
        optuna_private.storage(study).set_trial_user_attr(tid, records.FAILURE, "daemon_died")
        who = (t.user_attrs.get(records.OWNER) or {}).get("worker")
        reason = "its worker stopped beating" if tid in stale_ids else "its process died"
        optuna_private.storage(study).set_trial_user_attr(
            tid, records.REASON, f"{reason}{f' ({who})' if who else ''}"
        )
        study.tell(t.number, state=TrialState.FAIL)
        # A retry of trial 0 has retry_of 0: retried once, like any other.
        if t.user_attrs.get(records.RETRY_OF) is None:
            requeue(study, t)
        recovered.append(t.number)
    if recovered:
        log.warning("recovered trials whose daemon died", trials=recovered)
    return recovered


def requeue(study: optuna.Study, t: FrozenTrial | optuna.Trial) -> None:
    """Queue a trial's config again, as a retry of it (the baseline stays the baseline)."""
    if not t.params:
        return
    study.enqueue_trial(
        dict(t.params),
        user_attrs={
            records.RETRY_OF: t.number,
            records.BASELINE: bool(t.user_attrs.get(records.BASELINE)),
        },
        skip_if_exists=False,
    )
