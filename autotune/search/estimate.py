"""How long the rest of the study will take, from the time its deployed trials took.

A trial here costs what it cost so far on this hardware: model load, warm-up,
every benchmark level (measured again where noisy) and the restart around it,
taken as the median over the trials that deployed a server (results reused
from an earlier trial cost nothing). Several workers share what is left. The
finalists, measured again once the budget is spent, are counted too.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from datetime import datetime

import optuna
from optuna.trial import FrozenTrial, TrialState

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


@dataclass(frozen=True)
class Estimate:
    spent_s: float
    """Wall-clock from the first trial's start to the last trial's end (or now, if running)."""
    per_trial_s: float
    """Median duration of a trial that deployed a server."""
    remaining: int
    """Trials still to run (the study's total minus those finished)."""
    finalist_runs: int
    """Measurements of the finalists still to come (0 once they were measured)."""
    workers: int
    left_s: float
    ends_at: float
    """Wall-clock time (seconds since the epoch) at which the budget should be spent."""
    paused_since: float | None = None
    """No worker runs the study: when its last trial ended (then `ends_at` counts from now,
    as if it were resumed at once)."""

    def fits(self, deadline: float | None) -> int | None:
        """Trials that fit before `deadline` when the whole budget does not; else None."""
        if deadline is None or self.ends_at <= deadline:
            return None
        return max(0, math.floor((deadline - time.time()) / self.per_trial_s * self.workers))


def of(
    study: optuna.Study,
    n_trials: int,
    *,
    finalist_runs: int = 0,
    extra_s: float = 0.0,
    configs_left: int | None = None,
    live: bool | None = None,
    now: float | None = None,
) -> Estimate | None:
    """None until a trial that deployed a server has finished. `extra_s`: seconds of work
    to come that no trial's duration shows (the finalists' changing-load phases).
    `configs_left`: configs of the space no finished trial holds, so that a small space's
    last configs are not counted as the whole budget. `live`: a worker is running the study
    (None: some trial is RUNNING)."""
    now = time.time() if now is None else now
    trials = study.get_trials(deepcopy=False)
    deployed = [t for t in trials if _deployed(t)]
    # A server that crashed at once says nothing about how long a measured config takes.
    served = [t for t in deployed if not t.user_attrs.get("failure")] or deployed
    took = [s for s in (_seconds(t) for t in served) if s is not None]
    if not took:
        return None
    per = statistics.median(took)
    finished = sum(t.state in FINISHED for t in trials)
    remaining = max(0, n_trials - finished)
    if configs_left is not None:
        remaining = min(remaining, max(0, configs_left))
    running = [t for t in trials if t.state == TrialState.RUNNING]
    owners = {_owner(t) for t in running}
    workers = max(1, len(owners))
    left = (remaining + finalist_runs) * per / workers + extra_s
    starts = [t.datetime_start.timestamp() for t in trials if t.datetime_start is not None]
    ends = [t.datetime_complete.timestamp() for t in trials if t.datetime_complete is not None]
    live = bool(running) if live is None else live
    last = now if live else max(ends, default=now)
    spent = last - min(starts) if starts else 0.0
    paused = None if live else last
    return Estimate(spent, per, remaining, finalist_runs, workers, left, now + left, paused)


def _deployed(t: FrozenTrial) -> bool:
    return (
        t.state in (*FINISHED, TrialState.FAIL)
        and t.user_attrs.get("reused_from") is None
        and t.user_attrs.get("deployed") is not False
        and t.user_attrs.get("failure") not in ("interrupted", "daemon_died", "infrastructure")
        and t.datetime_start is not None
        and t.datetime_complete is not None
    )


def _seconds(t: FrozenTrial) -> float | None:
    if t.datetime_start is None or t.datetime_complete is None:
        return None
    return (t.datetime_complete - t.datetime_start).total_seconds()


def _owner(t: FrozenTrial) -> str:
    o = t.user_attrs.get("owner") or {}
    return f"{o.get('host')}/{o.get('worker')}/{o.get('pid')}"


def duration(seconds: float) -> str:
    """`1 h 05 min`, `12 min`, `40 s`: what a person reads at a glance."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def clock(epoch: float) -> str:
    """Local wall-clock time, with the day when it is not today."""
    moment = datetime.fromtimestamp(epoch).astimezone()
    if moment.date() == datetime.now().astimezone().date():
        return moment.strftime("%H:%M")
    return moment.strftime("%a %H:%M")


def sentence(e: Estimate) -> str:
    """One line for `status` and the log."""
    each = duration(e.per_trial_s)
    extra = f" and {e.finalist_runs} finalist runs" if e.finalist_runs else ""
    on = f" on {e.workers} workers" if e.workers > 1 else ""
    if e.remaining == 0 and not e.finalist_runs:
        return f"{duration(e.spent_s)} spent; budget spent"
    trials = "1 deployment" if e.remaining == 1 else f"{e.remaining} deployments"
    left = f"{trials}{extra} left at about {each} each{on}: about {duration(e.left_s)} more"
    if e.paused_since is not None:
        return (
            f"{duration(e.spent_s)} spent; paused since {clock(e.paused_since)} (no worker "
            f"runs it); {left} once resumed"
        )
    return f"{duration(e.spent_s)} spent; {left}, ending about {clock(e.ends_at)}"
