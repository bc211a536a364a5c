"""From traces to the numbers of the table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .run import APPLIED_AT, Trace

TARGET = 0.98
REGRET_AT = (10, 20, 30)


@dataclass(frozen=True)
class Stats:
    runs: int
    t98_median: float  # math.inf when fewer than half the runs got there within the budget
    t98_p90: float
    reached: float  # share of runs that got there within the budget
    found_median: float  # the same, had the study judged every deployed config noise-free
    infeasible: float  # share of deployments spent on refused or infeasible configs
    regret: tuple[float, ...]  # mean 1 - best/optimum after REGRET_AT deployments
    applied: tuple[float, ...]  # share of runs whose finalists' winner reached TARGET, APPLIED_AT
    finalist_runs: tuple[float, ...]  # mean deployments of the finalist stage, APPLIED_AT
    gpu_h_median: float  # GPU-hours until the declared best is worth TARGET (math.inf: never)
    gpu_h_p90: float
    gpu_h_total: float  # mean GPU-hours of the whole study (its budget of deployments)
    skipped: float  # mean configs per study ruled out by the capacity prediction
    wrongly_skipped: int  # over every study: skipped configs that were feasible
    pruned: float  # mean deployments per study stopped after some levels
    good_pruned: int  # over every study: pruned configs worth TARGET
    optimum_pruned: int  # over every study: the optimum pruned
    gpu_h_by_seed: dict[int, float] = field(default_factory=dict)  # to the target, per seed
    model_on: float = 0.0  # share of deployments after the baseline the model steered
    loo_rms: float | None = None  # median of the studies' last leave-one-out error
    lost_good: int = 0  # over every study: configs worth TARGET skipped or barred unmeasured
    lost: int = 0  # over every study: configs skipped or barred unmeasured
    t98_median_ci: tuple[float, float] = (math.nan, math.nan)  # the median's 95 % interval


def trials_to_target(trace: Trace, target: float = TARGET, *, found: bool = False) -> float:
    """Deployments (the baseline is 1) until the declared best is worth `target` of the optimum.

    With `found`, until a config worth that was deployed, whatever the noise made of it.
    """
    for i, ratio in enumerate(trace.found_ratio if found else trace.best_ratio, 1):
        if ratio >= target - 1e-12:
            return float(i)
    return math.inf


def gpu_hours_to_target(trace: Trace, target: float = TARGET) -> float:
    """GPU-hours spent until the declared best is worth `target` of the optimum."""
    n = trials_to_target(trace, target)
    return math.inf if math.isinf(n) else trace.gpu_s[int(n) - 1] / 3600.0


def ratio_after(trace: Trace, n: int) -> float:
    """The declared best after n deployments; a study that ran out of configs keeps its last."""
    if not trace.best_ratio:
        return 0.0
    return trace.best_ratio[min(n, len(trace.best_ratio)) - 1]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank: the smallest value that at least q of the runs are at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def median_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median: the order statistics (j, k) around the
    middle whose binomial(n, 1/2) mass between them is at least `level` (the widest, the
    smallest and largest value, when n is too small for that)."""
    ordered = sorted(values)
    n = len(ordered)
    pmf = [math.comb(n, i) / 2**n for i in range(n + 1)]
    for j in range(n // 2, -1, -1):
        # P(X_(j+1) <= median <= X_(n-j)) = P(j < B < n - j), B ~ binomial(n, 1/2)
        if sum(pmf[j + 1 : n - j]) >= level or j == 0:
            return ordered[j], ordered[n - 1 - j]
    return ordered[0], ordered[-1]


def summarise(traces: Sequence[Trace], budget: int) -> Stats:
    t98 = [trials_to_target(t) for t in traces]
    spent = [t.infeasible[:budget] for t in traces]
    steered = [t.model_on for t in traces]
    return Stats(
        runs=len(traces),
        t98_median=percentile(t98, 0.5),
        t98_p90=percentile(t98, 0.9),
        reached=sum(math.isfinite(x) for x in t98) / len(t98),
        found_median=percentile([trials_to_target(t, found=True) for t in traces], 0.5),
        infeasible=sum(sum(s) for s in spent) / max(1, sum(len(s) for s in spent)),
        regret=tuple(sum(1.0 - ratio_after(t, n) for t in traces) / len(traces) for n in REGRET_AT),
        applied=tuple(
            sum(t.applied[i] >= TARGET - 1e-12 for t in traces) / len(traces)
            for i in range(len(APPLIED_AT))
        ),
        finalist_runs=tuple(
            sum(t.finalist_runs[i] for t in traces) / len(traces) for i in range(len(APPLIED_AT))
        ),
        gpu_h_median=percentile([gpu_hours_to_target(t) for t in traces], 0.5),
        gpu_h_p90=percentile([gpu_hours_to_target(t) for t in traces], 0.9),
        gpu_h_total=sum(t.gpu_s[-1] if t.gpu_s else 0.0 for t in traces) / len(traces) / 3600,
        skipped=sum(t.skipped for t in traces) / len(traces),
        wrongly_skipped=sum(t.wrongly_skipped for t in traces),
        pruned=sum(t.pruned for t in traces) / len(traces),
        good_pruned=sum(t.good_pruned for t in traces),
        optimum_pruned=sum(t.optimum_pruned for t in traces),
        gpu_h_by_seed={t.seed: gpu_hours_to_target(t) for t in traces},
        model_on=sum(map(sum, steered)) / max(1, sum(map(len, steered))),
        loo_rms=_median([t.loo_rms for t in traces if t.loo_rms is not None]),
        lost_good=sum(r >= TARGET - 1e-12 for t in traces for r in t.lost),
        lost=sum(len(t.lost) for t in traces),
        t98_median_ci=median_interval(t98),
    )


def _median(values: Sequence[float]) -> float | None:
    return percentile(values, 0.5) if values else None
