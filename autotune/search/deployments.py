"""What a config is worth over deployments, not over one deployment's requests.

A trial's own interval (`value_ci`) is the sampling error of one deployment's requests.
Deployed again, the same config lands elsewhere: a restart is never exactly as fast as
the last one (the demo, 2026-12-06: `274.2 ±1.1 %`, then 262.7 when deployed again). So
the value of a config, and the gain stated over the unit as it was, come from its
deployments:

- each deployment's value counts once: the trial's own, its finalist runs, and the
  baseline's run beside the finalists (`run/finalists.py`);
- the spread between deployments of one config is pooled over every config deployed
  more than once (log values), with PRIOR_SD counted as PRIOR_DOF repeats until the
  repeats outweigh it;
- a config's worth is the geometric mean of its deployments, with a Student-t 95 %
  interval of that spread over its count; a gain over the baseline is the ratio of the
  two, its interval from both counts. One deployment gives a wide interval, as it
  should.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.search import gp, records
from autotune.search import study as st

#: The spread between deployments assumed until repeats show it: a restart's ~2 % and a
#: level's sampling error at the default confidence target (log throughput).
PRIOR_SD = 0.025
#: How many repeats the assumed spread weighs.
PRIOR_DOF = 2
#: Study user attribute the finalist stage writes (`run/finalists.FINALISTS`).
FINALISTS = records.STUDY_FINALISTS


@dataclass(frozen=True)
class Spread:
    """The deployment-to-deployment spread of one config's value, pooled."""

    sd: float
    """Standard deviation of a deployment's log value (0.02: about 2 %)."""
    dof: int
    """Degrees of freedom: the repeats' and the prior's."""
    configs: int
    """Configs deployed more than once, the repeats came from."""

    def text(self) -> str:
        seen = (
            f"from {self.configs} config{'s' if self.configs != 1 else ''} deployed more than once"
            if self.configs
            else "assumed: no config was deployed twice yet"
        )
        return f"{self.sd:.1%} between deployments ({seen})"


@dataclass(frozen=True)
class Worth:
    """A config's value over its deployments: geometric mean and 95 % interval, tok/s."""

    value: float
    low: float
    high: float
    deployments: int
    log_mean: float
    log_se: float

    def text(self, unit: str = "tok/s") -> str:
        n = self.deployments
        return (
            f"{self.value:.1f} {unit} ({self.low:.1f} … {self.high:.1f}, "
            f"{n} deployment{'s' if n != 1 else ''})"
        )


@dataclass(frozen=True)
class Gain:
    """One config's worth over another's: 0.14 is +14 %, with its 95 % interval."""

    point: float
    low: float
    high: float

    def text(self) -> str:
        return f"{self.point:+.1%} ({self.low:+.1%} … {self.high:+.1%})"


def key(t: FrozenTrial) -> tuple[tuple[str, Any], ...]:
    """One config, however many trials ran it (the unit as it is: the baseline's own)."""
    return tuple(sorted(gp.config_of(t).items()))


def values(study: optuna.Study) -> dict[tuple[tuple[str, Any], ...], list[float]]:
    """Each config's deployments: every feasible measured trial of it (a result copied from
    another is not a deployment), its finalist runs and the baseline's run beside them."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    by_number = {t.number: t for t in trials}
    out: dict[tuple[tuple[str, Any], ...], list[float]] = {}
    for t in trials:
        if _deployment(t):
            out.setdefault(key(t), []).append(float(t.values[0]))
    record = study.user_attrs.get(FINALISTS) or {}
    runs = dict(record.get("finalists") or {})
    if isinstance(record.get("baseline"), dict):
        runs[str(record["baseline"].get("trial"))] = record["baseline"]
    for number, entry in runs.items():
        t = by_number.get(int(number)) if str(number).isdigit() else None
        if t is None or not isinstance(entry, Mapping):
            continue
        again = [float(v) for v in entry.get("values") or () if isinstance(v, (int, float))]
        out.setdefault(key(t), []).extend(v for v in again if v > 0)
    return out


def spread(study: optuna.Study) -> Spread:
    return pooled(values(study).values())


def pooled(groups: Iterable[list[float]]) -> Spread:
    """The spread of log values within each group of two or more, with the prior's weight."""
    ss, dof, configs = 0.0, 0, 0
    for group in groups:
        logs = [math.log(v) for v in group if v > 0]
        if len(logs) < 2:
            continue
        mean = sum(logs) / len(logs)
        ss += sum((x - mean) ** 2 for x in logs)
        dof += len(logs) - 1
        configs += 1
    sd = math.sqrt((ss + PRIOR_DOF * PRIOR_SD**2) / (dof + PRIOR_DOF))
    return Spread(sd, dof + PRIOR_DOF, configs)


def worth(study: optuna.Study, t: FrozenTrial, sp: Spread | None = None) -> Worth | None:
    """Trial `t`'s config over all its deployments; None when it has none measured."""
    found = values(study).get(key(t)) or []
    return of(found, sp or spread(study))


def of(found: list[float], sp: Spread) -> Worth | None:
    logs = [math.log(v) for v in found if v > 0]
    if not logs:
        return None
    mean = sum(logs) / len(logs)
    se = sp.sd / math.sqrt(len(logs))
    t = t975(sp.dof)
    return Worth(
        math.exp(mean), math.exp(mean - t * se), math.exp(mean + t * se), len(logs), mean, se
    )


def gain(a: Worth, b: Worth, sp: Spread) -> Gain:
    """`a` over `b`: the ratio of their geometric means, its interval from both counts."""
    diff = a.log_mean - b.log_mean
    half = t975(sp.dof) * math.hypot(a.log_se, b.log_se)
    return Gain(math.expm1(diff), math.expm1(diff - half), math.expm1(diff + half))


def best_bound(candidates: Mapping[int, list[float]], sp: Spread) -> int | None:
    """Of several configs' deployments (by trial number): the one whose 95 % lower bound
    is highest, so that a config measured once and lucky does not beat one measured
    three times and steady (ties: the lower number)."""
    bounds = {n: w.low for n, vs in candidates.items() if (w := of(vs, sp)) is not None}
    if not bounds:
        return None
    return max(bounds, key=lambda n: (bounds[n], -n))


def _deployment(t: FrozenTrial) -> bool:
    return (
        t.state == TrialState.COMPLETE
        and t.values is not None
        and len(t.values) == 1
        and t.values[0] > 0
        and t.user_attrs.get(records.REUSED_FROM) is None
        and st.is_feasible(t)
    )


#: Student's t at 97.5 % by degrees of freedom (two-sided 95 %); the normal's beyond 30.
_T975 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}  # fmt: skip


def t975(dof: int) -> float:
    if dof > 30:
        return 1.96
    return _T975[max(d for d in _T975 if d <= max(1, dof))]


@dataclass(frozen=True)
class Headline:
    """What `best`, `status` and the report say of the best: its worth over deployments and
    its gain over the unit as it was, with the spread both come from."""

    worth: Worth
    spread: Spread
    baseline: Worth | None
    gain: Gain | None
    is_baseline: bool


def headline(study: optuna.Study, t: FrozenTrial, base: FrozenTrial | None) -> Headline | None:
    """None when `t` has no single measured value (a Pareto front, nothing feasible)."""
    if t.values is None or len(t.values) != 1:
        return None
    sp = spread(study)
    found = worth(study, t, sp)
    if found is None:
        return None
    same = base is not None and key(base) == key(t)
    was = worth(study, base, sp) if base is not None and not same else None
    return Headline(found, sp, was, gain(found, was, sp) if was is not None else None, same)
