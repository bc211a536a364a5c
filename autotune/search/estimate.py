"""How long the rest of the study will take, from what each kind of work cost so far.

What is left is trials, finalist runs and the finalists' changing-load phases, each
charged what the study measured it to cost on this hardware:

- a trial to come before the pruner may cut anything (until `warmup` trials were measured
  on every level): the mean wall time of the trials so far that ended on their own, every
  kind in its share (a config measured whole, one the server capped below the floor, one
  predicted short and never deployed); a mean, not a median, because what is asked is a
  sum;
- a trial to come once the pruner may cut: the mean of the trials since then, counted with
  two trials of a prior, split between one measured whole and one cut at the earliest (its
  load and overhead plus `cut_s`, the first level's shortest window). Which share of the
  configs to come end early depends on the landscape (nearly all of the demo's, none of
  the real llama-server's recorded nights, experiments/results/estimate_truth.md). Where the
  performance model predicts the landscape, `cut_share` is the share of the space it
  expects the pruner or the capacity gate to stop (`run/eta.cut_share`); where it cannot
  (no model, or a baseline that drafts nothing), even odds: the rule of succession, odds
  that move with every trial seen;
- a finalist run: the mean of the trials measured on every level (a finalist is never
  cut short), plus its changing-load phase (`extra_s`);
- the unit as it is (the baseline) when it drafts nothing is no sample of the configs to
  come: without speculation every step emits one token, its levels meet the confidence
  target in the shortest window, while a drafting config's accepted tokens vary from
  step to step and run its levels to `max_duration`, measured again when the target is
  missed (the real llama-server, experiments/results/estimate_truth.md: 7.5-s windows against
  31 s per level). Until a drafting trial has finished, a trial is charged the
  baseline's load and overhead plus the benchmark's upper bound (`bench_bound_s`).

Several workers share what is left.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from datetime import datetime

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.search import records

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
#: Trials' worth of weight the prior on what the pruner cuts carries against those seen.
PRIOR_TRIALS = 2


@dataclass(frozen=True)
class Estimate:
    spent_s: float
    """Wall-clock from the first trial's start to the last trial's end (or now, if running)."""
    per_trial_s: float
    """What a trial to come costs, in wall seconds (the mean of the trials so far)."""
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
    bench_bound_s: float | None = None,
    warmup: int | None = None,
    cut_s: float = 0.0,
    cut_share: float | None = None,
) -> Estimate | None:
    """None until a trial that deployed a server has finished. `extra_s`: seconds of work
    to come that no trial's duration shows (the finalists' changing-load phases).
    `configs_left`: configs of the space no finished trial holds, so that a small space's
    last configs are not counted as the whole budget. `live`: a worker is running the study
    (None: some trial is RUNNING). `bench_bound_s`: the longest the benchmark of one
    deployment may take (every level at its maximum window, twice with a CI target), what
    a drafting config is charged before one was measured. `warmup`: trials measured on
    every level before the pruner may cut one (None: it never does); `cut_s`: the
    benchmark seconds of a trial cut at the earliest; `cut_share`: the prior's share of
    trials that end early (None: even odds)."""
    now = time.time() if now is None else now
    trials = study.get_trials(deepcopy=False)
    costs = _costs(trials, bench_bound_s, warmup, cut_s, cut_share)
    if costs is None:
        return None
    finished = sum(t.state in FINISHED for t in trials)
    remaining = max(0, n_trials - finished)
    if configs_left is not None:
        remaining = min(remaining, max(0, configs_left))
    uncut = min(remaining, costs.uncut_left)
    trials_s = uncut * costs.uncut + (remaining - uncut) * costs.after_warmup
    per = trials_s / remaining if remaining else costs.uncut
    running = [t for t in trials if t.state == TrialState.RUNNING]
    owners = {_owner(t) for t in running}
    workers = max(1, len(owners))
    left = (trials_s + finalist_runs * costs.whole) / workers + extra_s
    starts = [t.datetime_start.timestamp() for t in trials if t.datetime_start is not None]
    ends = [t.datetime_complete.timestamp() for t in trials if t.datetime_complete is not None]
    live = bool(running) if live is None else live
    last = now if live else max(ends, default=now)
    spent = last - min(starts) if starts else 0.0
    paused = None if live else last
    return Estimate(spent, per, remaining, finalist_runs, workers, left, now + left, paused)


@dataclass(frozen=True)
class _Costs:
    """What each trial to come is charged, in wall seconds."""

    uncut: float
    """A trial before the pruner may cut: the mean of the trials so far."""
    uncut_left: int
    """Trials to come before the pruner may cut (a large number when it never will)."""
    after_warmup: float
    """A trial once the pruner may cut: its trials so far and the prior's two."""
    whole: float
    """A trial measured on every level: a finalist run."""


def _costs(
    trials: list[FrozenTrial],
    bench_bound_s: float | None,
    warmup: int | None,
    cut_s: float,
    cut_share: float | None = None,
) -> _Costs | None:
    """The module's rule; None before a trial that deployed a server has ended on its own."""
    ended = sorted(
        (t for t in trials if _ended_on_its_own(t) and _seconds(t) is not None),
        key=lambda t: t.number,
    )
    base = [t for t in ended if _deployed(t)]
    if not base:
        return None
    overhead = statistics.fmean(_overhead(t) for t in base)
    samples = [t for t in ended if not (t.user_attrs.get(records.BASELINE) and not _drafts(t))]
    if samples:
        mean = statistics.fmean(_seconds(t) or 0.0 for t in samples)
        full = [_seconds(t) or 0.0 for t in samples if _measured_whole(t)]
        whole = statistics.fmean(full) if full else mean
    else:
        # Only a baseline that drafts nothing: its load and overhead, the levels at their bound.
        own = statistics.fmean(_seconds(t) or 0.0 for t in base)
        mean = whole = own if bench_bound_s is None else max(own, overhead + bench_bound_s)
    if warmup is None:
        return _Costs(mean, 1 << 30, mean, whole)
    measured_whole = sum(_measured_whole(t) for t in ended)
    sampled = {t.number for t in samples}
    since = [t for t in _after_warmup(ended, warmup) if t.number in sampled]
    share = 0.5 if cut_share is None else min(1.0, max(0.0, cut_share))
    prior = PRIOR_TRIALS * ((1.0 - share) * whole + share * (overhead + cut_s))
    after = (sum(_seconds(t) or 0.0 for t in since) + prior) / (len(since) + PRIOR_TRIALS)
    return _Costs(mean, max(0, warmup - measured_whole), after, whole)


def _after_warmup(ended: list[FrozenTrial], warmup: int) -> list[FrozenTrial]:
    """The trials that came after `warmup` trials had been measured on every level."""
    whole = 0
    for i, t in enumerate(ended):
        if whole >= warmup:
            return ended[i:]
        whole += _measured_whole(t)
    return []


def _overhead(t: FrozenTrial) -> float:
    """A deployment's wall time outside its measured windows: load, warm-ups, restart."""
    return max(0.0, (_seconds(t) or 0.0) - _windows_wall(t))


def _ended_on_its_own(t: FrozenTrial) -> bool:
    """Finished, with times that say what its kind of trial costs (an interrupted one, or
    one a host failure ended, does not)."""
    return (
        t.state in (*FINISHED, TrialState.FAIL)
        and t.user_attrs.get(records.FAILURE) not in _NOT_A_COST
        and t.datetime_start is not None
        and t.datetime_complete is not None
    )


_NOT_A_COST = ("interrupted", "daemon_died", "infrastructure", "host_failure")


def _drafts(t: FrozenTrial) -> bool:
    """The server counted accepted drafts: speculation was on."""
    return t.user_attrs.get(records.ACCEPT_LENGTH) is not None


def _measured_whole(t: FrozenTrial) -> bool:
    return (
        t.state == TrialState.COMPLETE
        and bool(t.user_attrs.get(records.LEVELS))
        and not t.user_attrs.get(records.FAILURE)
        and t.user_attrs.get(records.REUSED_FROM) is None
    )


def _windows_wall(t: FrozenTrial) -> float:
    """The measured windows of its levels in wall seconds (a rehearsal's run faster)."""
    speedup = t.user_attrs.get(records.REHEARSAL_SPEEDUP) or 1.0
    windows = [lv.get("window_s") or 0.0 for lv in t.user_attrs.get(records.LEVELS) or []]
    return sum(windows) / float(speedup)


def _deployed(t: FrozenTrial) -> bool:
    return (
        t.state in (*FINISHED, TrialState.FAIL)
        and t.user_attrs.get(records.REUSED_FROM) is None
        and t.user_attrs.get(records.DEPLOYED) is not False
        and t.user_attrs.get(records.FAILURE) not in _NOT_A_COST
        and t.datetime_start is not None
        and t.datetime_complete is not None
    )


def _seconds(t: FrozenTrial) -> float | None:
    if t.datetime_start is None or t.datetime_complete is None:
        return None
    return (t.datetime_complete - t.datetime_start).total_seconds()


def _owner(t: FrozenTrial) -> str:
    o = t.user_attrs.get(records.OWNER) or {}
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
