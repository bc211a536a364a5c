"""Finalist validation: measure the top configs again until the best one is clear.

One benchmark of a config is one noisy sample: a restart is never exactly as
fast as the last one (about 2 %, plus the benchmark's own sampling error). When
the budget is spent, the top configs are measured again in rounds (A B C,
A B C, ...) so that drift over the night hits them all alike. After each round
every measurement so far is judged together (`judge`): the probability that
each finalist is the best. The stage stops once the leader's is at least
`CONFIDENCE`; finalists with almost no chance left are not measured again, so
the extra rounds go where the top configs are not yet separated, up to
`benchmark.finalist_rounds` rounds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import optuna

from autotune.bench.phase import ramp
from autotune.config import Config
from autotune.log import get
from autotune.run.trial import TrialResult
from autotune.search import deployments, gp, objective, records
from autotune.search import study as st
from autotune.search.gp.features import features

log = get("autotune.run.finalists")

#: Study user attribute: {"n_trials": N, "declared_best": trial number, "finalists": {...}}.
FINALISTS = "finalists"
#: Stop once the leader is, with at least this probability, the best or within
#: INDIFFERENCE of it: two configs 0.5 % apart are not worth a GPU-hour of telling apart.
CONFIDENCE = 0.95
INDIFFERENCE = 0.01
#: A finalist less likely than this to be the best is not measured again.
DROP_BELOW = 0.1
#: Measurement noise on log throughput assumed until repeats show it (a restart's ~2 %
#: plus a level's sampling error at the default confidence target).
PRIOR_NOISE_SD = 0.025
#: Noise levels the judging GP may choose from: repeats of one config pin it down.
JUDGE_NOISE_SD = (0.02, 0.03, 0.05)
#: Extra noise on a finalist's first value (winner's curse). Chosen with
#: experiments/sample_efficiency.py and `experiments/demo_quality.py --replay`, see
#: docs/sample-efficiency.md.
FIRST_EXTRA_SD = 0.02
DRAWS = 4000

Remeasure = Callable[[dict[str, Any] | None], TrialResult]
#: (config, study, finalists still in, their new values by trial number) -> verdicts.
Judge = Callable[
    [Config, optuna.Study, Sequence[optuna.trial.FrozenTrial], dict[int, list[float]]],
    dict[int, "Verdict"],
]


@dataclass(frozen=True)
class Verdict:
    """What all measurements say about one finalist: its log-throughput mean, its chance to be
    the best, and its chance to be the best or within INDIFFERENCE of it."""

    mean: float
    p_best: float
    p_near: float


def pending(cfg: Config, study: optuna.Study) -> bool:
    """True when this budget's finalists have not been validated yet."""
    if cfg.benchmark.finalists < 2 or cfg.benchmark.finalist_rounds < 1:
        return False
    if len(study.directions) != 1:
        return False  # a Pareto front has no single best to validate
    done = study.user_attrs.get(FINALISTS) or {}
    return done.get("n_trials") != cfg.study.n_trials


def expected_runs(cfg: Config, study: optuna.Study) -> int:
    """Finalist deployments still to come, for time estimates (`runs_expected`), and the
    unit as it was, measured once beside them when it is not among the best so far (a
    finalist itself, as on the demo, it needs no run of its own)."""
    if not pending(cfg, study):
        return 0
    return runs_expected(cfg) + _baseline_run_expected(cfg, study)


def runs_expected(cfg: Config) -> int:
    """The finalist stage's deployments before anything is known (none when the stage is
    off): the first round measures every finalist; a later round comes only while the
    leader is unclear, and measures only the contenders left (at least two). On average
    that is one run more than the first round: 3.8 runs for 3 finalists over the 24 cells
    of experiments/results/sample_efficiency.md (default sampler, 30 deployments), 4.9 over the
    demo's 13 recorded nights (experiments/results/raw/estimate_truth.jsonl: 3, 5 or 9 runs)."""
    b = cfg.benchmark
    if b.finalists < 2 or b.finalist_rounds < 1:
        return 0
    return min(b.finalists * b.finalist_rounds, b.finalists + 1)


def _baseline_run_expected(cfg: Config, study: optuna.Study) -> int:
    """1 when the unit as it was is measured and not among the best `finalists` configs by
    value so far (the finalists are likelier to be those than anything else), or when too
    few configs were measured to tell."""
    base = st.baseline_trial(study)
    if base is None or not runs_expected(cfg):
        return 0
    by_config: dict[Any, float] = {}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if st.is_feasible(t) and t.values and len(t.values) == 1:
            k = deployments.key(t)
            by_config[k] = max(by_config.get(k, 0.0), float(t.values[0]))
    if len(by_config) <= cfg.benchmark.finalists:
        return 1  # too few configs measured to tell: charged, not hoped away
    top = sorted(by_config, key=lambda k: -by_config[k])[: cfg.benchmark.finalists]
    return 0 if deployments.key(base) in top else 1


def expected_phase_s(cfg: Config, study: optuna.Study) -> float:
    """Seconds the finalists' changing-load phases will add (each finalist runs one), in
    wall time: a rehearsal's speed-up taken out."""
    if not pending(cfg, study) or not cfg.benchmark.load_phase:
        return 0.0
    trials = study.get_trials(deepcopy=False)
    speedups = [t.user_attrs.get(records.REHEARSAL_SPEEDUP) for t in trials]
    speedup = next((float(s) for s in speedups if isinstance(s, (int, float)) and s > 0), 1.0)
    phase = len(ramp(cfg.benchmark.concurrency)) * cfg.benchmark.load_phase_segment
    return cfg.benchmark.finalists * phase / speedup


def validate(
    cfg: Config,
    study: optuna.Study,
    remeasure: Remeasure,
    *,
    judge: str = "gp",
    under_changing_load: Remeasure | None = None,
) -> int | None:
    """Re-measure the top feasible configs; record and return the declared best trial.

    `under_changing_load` measures a config and then runs the changing-load phase: each
    finalist's first round uses it, and the declared best is the most likely best of those
    that held up (`_held_up`); the record says when that is not the fixed-level winner.
    """
    top = _top(cfg, study, judge)
    if len(top) < 2:
        return None
    log.info(
        "validating finalists",
        trials=[t.number for t in top],
        most_rounds=cfg.benchmark.finalist_rounds,
    )
    base = _baseline_beside(study, top)
    r = _measure_rounds(cfg, study, top, base, remeasure, judge, under_changing_load)
    # Declared on each finalist's own deployments, not the judge's pooled mean: the one
    # whose lower bound is highest (a steady config over a lucky one).
    bounds = _bounds(study, top, r.fresh, base, r.base_runs, r.verdicts)
    declared = max(bounds, key=lambda n: (bounds[n], -n)) if bounds else None
    fixed_winner = declared
    declared = _held_up(declared, bounds, r.phases)
    summary = _summary(top, r)
    study.set_user_attr(
        FINALISTS,
        {
            "n_trials": cfg.study.n_trials,
            "declared_best": declared,
            "rounds": r.rounds,
            "runs": sum(len(v) for v in r.fresh.values()) + len(r.failed) + (base is not None),
            "judge": judge,
            "declared_by": "the highest 95 % lower bound over each finalist's deployments",
            "finalists": summary,
            **(
                {"baseline": {"trial": base.number, "values": [round(v, 2) for v in r.base_runs]}}
                if base is not None
                else {}
            ),
            **({"fixed_level_winner": fixed_winner} if fixed_winner != declared else {}),
        },
    )
    if declared is not None:
        log.info(
            "declared best",
            trial=declared,
            estimate=summary[str(declared)]["estimate"],
            p_best=f"{r.verdicts[declared].p_best:.0%}",
            within_1pct=f"{r.verdicts[declared].p_near:.0%}",
            rounds=r.rounds,
        )
    return declared


@dataclass
class _Rounds:
    """What the finalists' rounds measured."""

    fresh: dict[int, list[float]]
    """Each finalist's values measured again."""
    failed: set[int] = field(default_factory=set)
    """Finalists that failed when measured again: never applied."""
    phases: dict[int, dict[str, Any]] = field(default_factory=dict)
    verdicts: dict[int, Verdict] = field(default_factory=dict)
    rounds: int = 0
    base_runs: list[float] = field(default_factory=list)
    """The unit as it was, measured beside the first round."""


def _measure_rounds(
    cfg: Config,
    study: optuna.Study,
    top: Sequence[optuna.trial.FrozenTrial],
    base: optuna.trial.FrozenTrial | None,
    remeasure: Remeasure,
    judge: str,
    under_changing_load: Remeasure | None,
) -> _Rounds:
    """Rounds of the contenders measured again, until the leader is clear (or the cap)."""
    r = _Rounds({t.number: [] for t in top})
    cap = cfg.benchmark.finalist_rounds
    contenders = list(top)
    for rounds in range(1, cap + 1):
        r.rounds = rounds
        if rounds == 1 and base is not None:
            r.base_runs = _measure_baseline(base, remeasure)
        measure = under_changing_load if rounds == 1 and under_changing_load else remeasure
        for t in contenders:
            log.info("finalist", round=f"{rounds}/{cap}", trial=t.number, config=st.trial_config(t))
            _measure_finalist(t, measure, r)
        alive = [t for t in top if t.number not in r.failed]
        if not alive:
            r.verdicts = {}
            break
        r.verdicts = JUDGES[judge](cfg, study, alive, r.fresh)
        leader = max(alive, key=lambda t: (r.verdicts[t.number].mean, -t.number))
        chance = r.verdicts[leader.number].p_near
        log.info(
            "finalists judged",
            leader=leader.number,
            p_best=f"{r.verdicts[leader.number].p_best:.0%}",
            within_1pct=f"{chance:.0%}",
        )
        contenders = [t for t in alive if t is leader or r.verdicts[t.number].p_best >= DROP_BELOW]
        if chance >= CONFIDENCE or len(contenders) < 2:
            break
    return r


def _measure_finalist(t: optuna.trial.FrozenTrial, measure: Remeasure, r: _Rounds) -> None:
    config = t.user_attrs.get(records.CONFIG)
    result = measure(dict(config) if config else None)
    if isinstance(result.attrs.get(records.LOAD_PHASE), dict):
        r.phases[t.number] = result.attrs[records.LOAD_PHASE]
    if result.score.values[0] > 0 and _holds(result.score, result.attrs):
        r.fresh[t.number].append(result.score.values[0])
    else:
        # Never apply a config that failed while being validated.
        r.failed.add(t.number)
        log.warning("finalist failed when measured again: out", trial=t.number)


def _summary(top: Sequence[optuna.trial.FrozenTrial], r: _Rounds) -> dict[str, Any]:
    """Per finalist, as the study records it: first value, values again, the judge's view."""
    return {
        str(t.number): {
            "first": round(float(t.value), 2),
            "values": [round(v, 2) for v in r.fresh[t.number]],
            **(
                {
                    "estimate": round(math.exp(r.verdicts[t.number].mean), 2),
                    "p_best": round(r.verdicts[t.number].p_best, 4),
                    "p_near": round(r.verdicts[t.number].p_near, 4),
                }
                if t.number in r.verdicts and t.number not in r.failed
                else {"failed": True}
            ),
            **({"load_phase": r.phases[t.number]} if t.number in r.phases else {}),
        }
        for t in top
    }


def _baseline_beside(
    study: optuna.Study, top: Sequence[optuna.trial.FrozenTrial]
) -> optuna.trial.FrozenTrial | None:
    """The unit as it was, measured again beside the finalists (unless it is one): the gain
    over it is then counted on two deployments of each, in the same hour."""
    base = st.baseline_trial(study)
    if base is None or any(deployments.key(t) == deployments.key(base) for t in top):
        return None
    return base


def _measure_baseline(base: optuna.trial.FrozenTrial, remeasure: Remeasure) -> list[float]:
    config = base.user_attrs.get(records.CONFIG)
    log.info("the unit as it was, measured beside the finalists", trial=base.number)
    result = remeasure(dict(config) if config else None)
    if result.score.values[0] > 0 and _holds(result.score, result.attrs):
        return [result.score.values[0]]
    log.warning("the unit as it was failed when measured again", trial=base.number)
    return []


def _bounds(
    study: optuna.Study,
    top: Sequence[optuna.trial.FrozenTrial],
    fresh: Mapping[int, list[float]],
    base: optuna.trial.FrozenTrial | None,
    base_runs: list[float],
    verdicts: Mapping[int, Verdict],
) -> dict[int, float]:
    """Each finalist still in: the 95 % lower bound of its value over all its deployments,
    with the spread between deployments pooled over everything deployed more than once."""
    groups = deployments.values(study)
    for t in top:
        groups.setdefault(deployments.key(t), [])
        groups[deployments.key(t)] = [*groups[deployments.key(t)], *fresh.get(t.number, ())]
    if base is not None:
        groups[deployments.key(base)] = [*groups.get(deployments.key(base), []), *base_runs]
    sp = deployments.pooled(groups.values())
    out = {}
    for t in top:
        if t.number in verdicts:
            w = deployments.of(groups[deployments.key(t)], sp)
            if w is not None:
                out[t.number] = w.low
    return out


def _held_up(
    declared: int | None, verdicts: Mapping[int, float], phases: Mapping[int, Mapping[str, Any]]
) -> int | None:
    """The fixed-level winner if it held up under changing load (or was not put through it);
    else the most likely best finalist that did; else, with none held up, the winner still."""
    if declared is None or phases.get(declared, {}).get("held_up", True):
        return declared
    problems = "; ".join(phases[declared].get("problems") or ())
    held = [n for n in verdicts if phases.get(n, {}).get("held_up", True)]
    if not held:
        log.warning(
            "no finalist held up under changing load: the fixed-level winner stays the best",
            trial=declared,
            problems=problems,
        )
        return declared
    best = max(held, key=lambda n: (verdicts[n], -n))
    log.warning(
        "the fixed-level winner did not hold up under changing load: declaring the best that did",
        fixed_level_winner=declared,
        problems=problems,
        declared=best,
    )
    return best


def _holds(score: objective.Score, attrs: Mapping[str, Any]) -> bool:
    """Feasible when measured again, or infeasible only by a close call: a statistic that
    came out either side of its limit on this many requests says nothing either way (the
    sampler saw its margin; the report and status say the verdict was close)."""
    if score.feasible:
        return True
    p = attrs.get(records.FEASIBLE_P)
    close = attrs.get(records.CLOSE_CONSTRAINTS) or ()
    close_only = all(k in close for k, v in score.constraints.items() if v > 0)
    return close_only and isinstance(p, (int, float)) and p > objective.CLOSE_LOW


# -- judging ----------------------------------------------------------------------------
def judge_gp(
    cfg: Config,
    study: optuna.Study,
    alive: Sequence[optuna.trial.FrozenTrial],
    fresh: dict[int, list[float]],
) -> dict[int, Verdict]:
    """Everything known: a GP over every measured config plus the finalists' repeats.

    A finalist's first value is what put it in the top (winner's curse); the GP
    weighs it against its neighbours' and its own repeats instead of trusting it.
    Falls back to `judge_fresh` where the space cannot be placed in the GP's inputs.
    """
    space = cfg.space
    if not all(space.complete(st.trial_config(t)) for t in alive):
        return judge_fresh(cfg, study, alive, fresh)
    trials = [
        t
        for t in gp.measured(study.get_trials(deepcopy=False))
        if (gp.value_of(t) or 0.0) > 0 and space.complete(st.trial_config(t))
    ]
    X = [features(space, st.trial_config(t)) for t in trials]
    y = [math.log(gp.value_of(t) or 1.0) for t in trials]
    point = gp.point_sd(trials)
    # De-biased first values: a finalist's first measurement is what selected it, so it
    # counts as a noisier one once the finalist has fresh measurements of its own.
    remeasured = {t.number for t in alive if fresh.get(t.number)}
    point = [
        math.hypot(sd, FIRST_EXTRA_SD) if t.number in remeasured else sd
        for sd, t in zip(point, trials, strict=True)
    ]
    for t in alive:
        for v in fresh.get(t.number, ()):
            X.append(features(space, st.trial_config(t)))
            y.append(math.log(v))
            point.append(0.0)
    model = gp.GP.fit(
        np.array(X), np.array(y), prior_sd=gp.PRIOR_LOG_SD,
        noise_sd=JUDGE_NOISE_SD, point_sd=point,
    )  # fmt: skip
    mean, cov = model.joint(np.array([features(space, st.trial_config(t)) for t in alive]))
    return _verdicts(alive, mean, cov)


def judge_fresh(
    cfg: Config,
    study: optuna.Study,
    alive: Sequence[optuna.trial.FrozenTrial],
    fresh: dict[int, list[float]],
) -> dict[int, Verdict]:
    """The new measurements only, each finalist on its own (the first value left out)."""
    logs = {t.number: [math.log(v) for v in fresh[t.number]] for t in alive}
    dof = sum(len(v) - 1 for v in logs.values() if len(v) > 1)
    ss = sum(sum((x - np.mean(v)) ** 2 for x in v) for v in logs.values() if len(v) > 1)
    # The assumed noise counts as two repeats until the repeats outweigh it.
    var = (ss + 2 * PRIOR_NOISE_SD**2) / (dof + 2)
    mean = np.array([float(np.mean(logs[t.number])) for t in alive])
    cov = np.diag([var / len(logs[t.number]) for t in alive])
    return _verdicts(alive, mean, cov)


def judge_median(
    cfg: Config,
    study: optuna.Study,
    alive: Sequence[optuna.trial.FrozenTrial],
    fresh: dict[int, list[float]],
) -> dict[int, Verdict]:
    """The rule before this one, kept for the benchmark: best median of the new measurements,
    every round measured (no chance computed, so nobody is dropped and nothing stops early)."""
    share = 1.0 / len(alive)
    return {
        t.number: Verdict(math.log(statistics.median(fresh[t.number])), share, share) for t in alive
    }


JUDGES: dict[str, Judge] = {
    "gp": judge_gp,
    "fresh": judge_fresh,
    "median": judge_median,
}


def _verdicts(
    alive: Sequence[optuna.trial.FrozenTrial], mean: np.ndarray, cov: np.ndarray
) -> dict[int, Verdict]:
    # Seeded: the same measurements always give the same verdict.
    draws = np.random.default_rng(0).multivariate_normal(mean, cov, size=DRAWS, method="cholesky")
    wins = np.bincount(np.argmax(draws, axis=1), minlength=len(alive)) / DRAWS
    near = (draws >= draws.max(axis=1, keepdims=True) - math.log1p(INDIFFERENCE)).mean(axis=0)
    return {
        t.number: Verdict(float(mean[i]), float(wins[i]), float(near[i]))
        for i, t in enumerate(alive)
    }


def _top(cfg: Config, study: optuna.Study, judge: str) -> list[optuna.trial.FrozenTrial]:
    """The configs most likely to be the best, by the same judge that will decide.

    Ranked by raw value, the best config measured a little low loses its place to
    lucky neighbours; the judge weighs each value against the rest first.
    """
    seen: set[tuple[tuple[str, Any], ...]] = set()
    distinct = []
    for t in sorted(
        (
            t
            for t in study.get_trials(deepcopy=False)
            if st.is_feasible(t) and t.user_attrs.get(records.REUSED_FROM) is None
        ),
        key=lambda t: -_upper(t),
    ):
        key = tuple(sorted(st.trial_config(t).items()))
        if key not in seen:
            seen.add(key)
            distinct.append(t)
    k = cfg.benchmark.finalists
    if judge != "gp" or not all(cfg.space.complete(st.trial_config(t)) for t in distinct):
        # By value, and the config the model ranks first always among them.
        best = st.best_trials(study)
        key = tuple(sorted(st.trial_config(best[0]).items())) if best else None
        first = [t for t in distinct if tuple(sorted(st.trial_config(t).items())) == key]
        return (first + [t for t in distinct if t not in first])[:k]
    if len(distinct) <= k:
        return distinct
    verdicts = judge_gp(cfg, study, distinct, {})
    return sorted(distinct, key=lambda t: (-verdicts[t.number].p_best, -verdicts[t.number].mean))[
        :k
    ]


def _upper(t: optuna.trial.FrozenTrial) -> float:
    """A trial's value, or for one whose benchmark stayed uncertain (a level missed its
    confidence target twice) the top of its interval: a config that may be the best is
    measured again rather than dropped on one noisy number."""
    ci = t.user_attrs.get(records.VALUE_CI)
    if t.user_attrs.get(records.UNCERTAIN_LEVELS) and isinstance(ci, (int, float)) and ci > 0:
        return float(t.value) * (1.0 + float(ci))
    return float(t.value)


def validation_of(study: optuna.Study, number: int) -> dict[str, Any] | None:
    """The finalist measurements of trial `number` (finished trials cannot take new attrs)."""
    found = ((study.user_attrs.get(FINALISTS) or {}).get("finalists") or {}).get(str(number))
    if not isinstance(found, dict) or not isinstance(found.get("load_phase"), dict):
        return found
    # Its verdict: the timeline (a few hundred numbers) is the report's to draw.
    phase = found["load_phase"]
    verdict = {
        "held_up": phase.get("held_up"),
        "tok_s": phase.get("output_throughput"),
        "tier_switches": len(phase.get("switches") or ()),
        "stalls": phase.get("stalls"),
        **({"problems": phase["problems"]} if phase.get("problems") else {}),
    }
    return {**found, "load_phase": verdict}
