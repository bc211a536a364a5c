"""Stop a trial once it cannot plausibly beat the best so far: after a level, or within one.

Every trial measures each level of its objective (the geometric mean's
three, or the one of `mode: single`): warm-up, a window of 5-30 s, a drain,
and a second run of a level that missed its CI target. A config already far
behind rarely catches up. Per level, a GP over the log throughput of every
trial measured at that level (the same GP as the sampler's) predicts this
config's levels not measured yet; with the measured ones it gives the
config's value and its uncertainty:

    log value = (sum of measured log levels + sum of predicted ones) / n
    var       = ((k START_SD)^2 + sum of the k windows' variances
                 + sum of predicted variances) / n^2 + INCUMBENT_SD^2

for k levels measured: the start's speed is common to them all, each window
adds its own error (WINDOW_SD, or the window's own CI when that is wider: a
window still running, a level that missed its target). When the chance that the value beats the
incumbent (the feasible trial the level models rank first) falls below
PRUNE_BELOW, the trial stops: after a level, before a second run of it, or
inside a level's window once it is min_duration long (`bench.run_level`'s
`give_up`). It is recorded PRUNED with the levels it measured and that
estimate, which the sampler learns from; it is never declared best and never
a finalist.

Levels are measured in the order most likely to stop a losing trial soon:
for each level the chance that measuring it alone would prune, from the
same models (the level the models know least about at this config usually
goes first). Until MIN_TRIALS trials measured every objective level, with
the Pareto objective, or with `study.prune: false`, the configured order
runs and nothing is pruned.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import Config
from autotune.search import gp, records
from autotune.search.gp.features import features
from autotune.search.gp.sampler import NOISE_SD

#: A trial stops when its chance of beating the incumbent falls below this.
PRUNE_BELOW = 0.001
#: Trials measured at every level before anything is pruned.
MIN_TRIALS = 4
#: Log-scale error every level of one deployment shares: a restarted server is about 2 %
#: faster or slower than the last time (the simulator's --sim-noise default, an assumption:
#: docs/calibration.md has no restart-to-restart figure).
START_SD = 0.02
#: Log-scale sampling error of a finished level's window (its CI target is ±2 % at 95 %;
#: a level that missed it carries its own, wider).
WINDOW_SD = 0.015
#: How well the incumbent's value is known: the GP pools its neighbours' levels, but the
#: best of several estimates leans high.
INCUMBENT_SD = 0.02
PRUNED = gp.PRUNED

_Z = NormalDist().inv_cdf(1.0 - PRUNE_BELOW)


def agreement(earlier_ci: float | None, here_ci: float | None) -> float:
    """95 % bound on the relative difference of two single-start values of one config: each
    window's own interval (a relative 95 % half-width; None or 0 when the level met its
    target and none is recorded: WINDOW_SD then) and each start's spread."""

    def sd(ci: float | None) -> float:
        return ci / 1.96 if ci else WINDOW_SD

    return 1.96 * math.sqrt(sd(earlier_ci) ** 2 + sd(here_ci) ** 2 + 2 * START_SD**2)


@dataclass(frozen=True)
class Verdict:
    """Why a trial stopped early: what it measured, what it would have scored, against what."""

    measured: tuple[int, ...]
    estimate: float
    """The expected objective value (tok/s) given the levels measured."""
    log_sd: float
    p_beat: float
    incumbent: int
    incumbent_value: float
    when: str = "after the level"
    """When the last level in `measured` stopped: "after the level" (measured in full),
    "one run, before a second" (its CI missed) or "its window so far" (cut short)."""

    def attrs(self) -> dict[str, Any]:
        return {
            "after_levels": list(self.measured),
            "when": self.when,
            "estimate": round(self.estimate, 2),
            "log_sd": round(self.log_sd, 4),
            "p_beat": round(self.p_beat, 5),
            "incumbent": self.incumbent,
            "incumbent_value": round(self.incumbent_value, 2),
        }


@dataclass(frozen=True)
class LevelPlan:
    """The order to measure a trial's levels in, and the test after (and during) each one."""

    levels: tuple[int, ...]
    models: dict[int, tuple[float, float]] | None = None
    """Per objective level: the model's log mean and sd at this config (None: never prune)."""
    incumbent: tuple[int, float] | None = None
    """(trial number, log value) of the best feasible trial by the level models."""

    def verdict(
        self, measured: Mapping[int, float], uncertain: Mapping[int, float] | None = None
    ) -> Verdict | None:
        """A Verdict when the trial should stop, given the levels in `measured` (tok/s).

        `uncertain`: levels measured less well than a finished level (a window cut short,
        a CI target missed), with the log sd of their figure.
        """
        if self.models is None or self.incumbent is None or not measured:
            return None
        objective = list(self.models)
        uncertain = uncertain or {}
        done = [c for c in objective if c in measured]
        if not done or any(measured[c] <= 0 for c in done):
            return None
        if len(done) == len(objective) and not any(c in uncertain for c in done):
            return None  # measured in full: a result, not a guess
        n = len(objective)
        rest = [c for c in objective if c not in measured]
        total = sum(math.log(measured[c]) for c in done) + sum(self.models[c][0] for c in rest)
        # One start's speed is in every measured level; each window adds its own error.
        err = (len(done) * START_SD) ** 2 + sum(
            max(WINDOW_SD, uncertain.get(c, 0.0)) ** 2 for c in done
        )
        var = err + sum(self.models[c][1] ** 2 for c in rest)
        log_value = total / n
        sd = math.sqrt(var / n**2 + INCUMBENT_SD**2)
        number, best = self.incumbent
        p_beat = 1.0 - NormalDist().cdf((best - log_value) / sd)
        if p_beat >= PRUNE_BELOW:
            return None
        return Verdict(
            tuple(c for c in self.levels if c in measured),
            math.exp(log_value),
            sd,
            p_beat,
            number,
            math.exp(best),
        )

    def give_up(self, c: int, measured: Mapping[int, float]) -> GiveUp | None:
        """The test for level `c` while it runs (None: nothing to test)."""
        if self.models is None or c not in self.models:
            return None
        return GiveUp(self, c, dict(measured))


@dataclass
class GiveUp:
    """`bench.run_level`'s give_up for one level: whether the window so far already shows
    that the config cannot win; keeps the verdict that ended it."""

    plan: LevelPlan
    level: int
    measured: dict[int, float]
    verdict: Verdict | None = None
    time_scale: float = 1.0
    """The server's speed-up (a rehearsal): the window's tok/s back in real-server units."""

    def __call__(self, tok_s: float, ci: float) -> bool:
        live = {**self.measured, self.level: tok_s / self.time_scale}
        self.verdict = self.plan.verdict(live, {self.level: ci / 1.96})
        return self.verdict is not None


def warmup(cfg: Config) -> int | None:
    """Trials measured on every level before a trial may be cut (None: none ever is)."""
    if not cfg.study.prune or cfg.objective.mode not in ("geomean", "single"):
        return None
    return MIN_TRIALS if cfg.space.enumerable() else None


def plan(cfg: Config, study: optuna.Study, config: Mapping[str, Any] | None) -> LevelPlan:
    """The level plan for a trial of `config` (None: the unit as it is; never pruned)."""
    levels = tuple(cfg.benchmark.concurrency)
    space = cfg.space
    mode, single = cfg.objective.mode, cfg.objective.level
    if (
        not cfg.study.prune
        or mode not in ("geomean", "single")
        or config is None
        or not space.enumerable()
        or not space.complete(dict(config))
    ):
        return LevelPlan(levels)
    objective = levels if mode == "geomean" else tuple(c for c in levels if c == single)
    if not objective:
        return LevelPlan(levels)
    trials = gp.measured(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    trials += pruned_trials(study.get_trials(deepcopy=False, states=(TrialState.PRUNED,)))
    trials = [t for t in trials if space.complete(gp.config_of(t))]
    full = [t for t in trials if all(_level(t, c) for c in objective)]
    feasible = [t for t in full if t.state == TrialState.COMPLETE and _feasible(t)]
    if len(full) < MIN_TRIALS or not feasible:
        return LevelPlan(levels)
    x = np.array([features(space, dict(config))])
    xf = np.array([features(space, gp.config_of(t)) for t in feasible])
    models: dict[int, tuple[float, float]] = {}
    incumbent_logs = np.zeros(len(feasible))
    for c in objective:
        rows = [t for t in trials if _level(t, c)]
        X = np.array([features(space, gp.config_of(t)) for t in rows])
        y = np.array([math.log(_level(t, c) or 1.0) for t in rows])
        model = gp.GP.fit(X, y, prior_sd=gp.PRIOR_LOG_SD, noise_sd=NOISE_SD)
        mu, sd = model.predict(x)
        models[c] = (float(mu[0]), float(sd[0]))
        incumbent_logs += model.predict(xf)[0] / len(objective)
    best = int(np.argmax(incumbent_logs))
    incumbent = (feasible[best].number, float(incumbent_logs[best]))
    # The objective's levels first, most telling first; the others (`single` with more
    # levels configured) after them, in their order.
    first = order(objective, models, incumbent[1])
    return LevelPlan(first + tuple(c for c in levels if c not in first), models, incumbent)


def order(
    levels: Sequence[int], models: Mapping[int, tuple[float, float]], best: float
) -> tuple[int, ...]:
    """The levels by their chance to stop the trial when measured first (ties: as given)."""
    return tuple(sorted(levels, key=lambda c: -_chance_to_prune(c, levels, models, best)))


def _chance_to_prune(
    c: int, levels: Sequence[int], models: Mapping[int, tuple[float, float]], best: float
) -> float:
    """The chance that measuring level `c` alone stops the trial, under the models."""
    n = len(levels)
    others = [u for u in levels if u != c]
    sd_after = math.sqrt(
        (START_SD**2 + WINDOW_SD**2 + sum(models[u][1] ** 2 for u in others)) / n**2
        + INCUMBENT_SD**2
    )
    # Pruned when the measured log level falls below tau.
    tau = n * (best - _Z * sd_after) - sum(models[u][0] for u in others)
    mu, sd = models[c]
    return NormalDist().cdf((tau - mu) / math.sqrt(sd**2 + START_SD**2 + WINDOW_SD**2))


def pruned_trials(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """Pruned trials that measured something (a copy of another trial's result excluded)."""
    return [
        t
        for t in trials
        if t.state == TrialState.PRUNED
        and isinstance(t.user_attrs.get(PRUNED), dict)
        and t.user_attrs.get(records.REUSED_FROM) is None
        and gp.config_of(t)
    ]


def _level(t: FrozenTrial, c: int) -> float | None:
    v = t.user_attrs.get(records.at(records.OUTPUT_TOK_S_AT, c))
    return float(v) if isinstance(v, (int, float)) and v > 0 else None


def _feasible(t: FrozenTrial) -> bool:
    return all(v <= 0 for v in t.constraints.values())
