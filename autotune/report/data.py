"""What the report shows, read out of the study: one row per trial, plus the settings it ran with.

Everything the plots and tables need is computed here, so that `plots` and
`html` only draw and format.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import Config
from autotune.search import deployments, records, warm_start, workers
from autotune.search import study as st
from autotune.search.capacity import FAILURE as CAPACITY_PREDICTED
from autotune.store.storage import redact

#: Study user attribute where the closing re-measurement of the top configs is kept.


@dataclass(frozen=True)
class TrialRow:
    number: int
    state: str
    config: dict[str, Any]
    """As the server ran it (`resolved`), else as proposed."""
    values: tuple[float, ...] | None
    feasible: bool
    baseline: bool
    reused_from: int | None
    throughput: dict[int, float]
    """Output tok/s per concurrency level (empty when nothing was benchmarked)."""
    levels: dict[int, dict[str, Any]]
    """The benchmark's per-level results (`LevelResult.to_dict()`), by concurrency."""
    max_running_requests: int | None
    failure: str | None
    reason: str | None
    violated: dict[str, float]
    """Constraints above 0, by name."""
    value_ci: float | None = None
    """The value's relative 95 % half-width, from its levels' confidence intervals."""
    uncertain_levels: tuple[int, ...] = ()
    """Levels that missed the confidence target even when measured twice."""
    close_constraints: tuple[str, ...] = ()
    """Constraints still either side of their limit when measured twice."""
    feasible_p: float | None = None
    """The chance that every constraint holds, from the intervals of what they judge."""
    pruned: Mapping[str, Any] | None = None
    """Stopped after some levels (`autotune/search/pruning.py`): the levels measured, the value
    they let expect, and the best trial it could not plausibly beat."""
    predicted: bool = False
    """Ruled out by the capacity prediction without a server (`autotune/search/capacity.py`)."""
    prediction: Mapping[str, Any] | None = None
    """What the performance model predicted before the sampler chose it
    (`autotune/search/perf/`): value, per-level tok/s, accept length, running requests."""
    rates: tuple[Mapping[str, Any], ...] = ()
    """Its open-loop levels (`benchmark.request_rate`), lowest rate first."""

    @property
    def measured(self) -> bool:
        """Benchmarked by this trial itself (a reused result repeats another trial's)."""
        return self.reused_from is None and bool(self.throughput)

    @property
    def deployed(self) -> bool:
        """This trial started a server (a reused result found before deploying did not, nor
        did a config predicted to fall short of the running-requests floor)."""
        return self.reused_from is None and not self.predicted


@dataclass(frozen=True)
class LevelBest:
    """The best feasible config at one concurrency level: a line of the operator's schedule."""

    concurrency: int
    trial: TrialRow | None
    baseline_tok_s: float | None

    @property
    def tok_s(self) -> float | None:
        return None if self.trial is None else self.trial.throughput[self.concurrency]

    @property
    def gain(self) -> float | None:
        """Relative to the baseline at the same level (0.25 = 25 % more tok/s)."""
        if self.tok_s is None or not self.baseline_tok_s:
            return None
        return self.tok_s / self.baseline_tok_s - 1.0

    def level(self, key: str) -> Any:
        if self.trial is None:
            return None
        return self.trial.levels.get(self.concurrency, {}).get(key)


@dataclass(frozen=True)
class StudyData:
    name: str
    storage: str
    metric_names: list[str]
    knobs: list[str]
    concurrency: list[int]
    settings: Mapping[str, Any]
    """The config summary the study ran with (study user attribute `autotune_config`)."""
    trials: list[TrialRow]
    """Finished trials (COMPLETE, and PRUNED: stopped after some levels), by number."""
    unfinished: dict[str, int]
    """Other trials by state: FAIL (not the config's fault), RUNNING, WAITING."""
    best: list[int]
    """The best feasible trial, or the feasible Pareto front (`autotune best`)."""
    n_trials: int
    min_running_requests: int | None
    level_sample: dict[str, Any] = field(default_factory=dict)
    """One measured level's fields that describe the measurement (temperature, ...)."""
    validation: dict[int, dict[str, Any]] = field(default_factory=dict)
    """The top configs measured again at the end of the budget:
    {trial: {first, values, estimate, p_best, p_near} or {first, values, failed}}."""
    declared_best: int | None = None
    time: str = ""
    """Time spent so far, per trial, and what is left (`estimate.sentence`)."""
    workers: list[str] = field(default_factory=list)
    """Each running trial's worker: alive, or gone since when (`Liveness.sentence`)."""
    rehearsal_speedup: float | None = None
    """A rehearsal on the simulated server run this many times faster than real time
    (`--sim-speedup`); its figures are in real-server units."""
    performance_model: Mapping[str, Any] = field(default_factory=dict)
    """The performance model's state when the sampler last asked: on, or off and why;
    the deployments it was fitted on and its leave-one-out error."""
    headline: deployments.Headline | None = None
    """The best's worth over its deployments and its gain over the unit as it was."""
    warm_start: list[str] = field(default_factory=list)
    """Where a `start --from` study started, what differs, and per config measured in both
    the earlier value against now (`warm_start.sentences`); empty for a cold study."""

    def trial(self, number: int) -> TrialRow:
        return next(t for t in self.trials if t.number == number)

    @property
    def baseline(self) -> TrialRow | None:
        return next((t for t in self.trials if t.baseline and t.reused_from is None), None)

    @property
    def infeasible(self) -> list[TrialRow]:
        return [t for t in self.trials if not t.feasible and t.pruned is None]

    @property
    def pruned(self) -> list[TrialRow]:
        return [t for t in self.trials if t.pruned is not None]

    @property
    def winner(self) -> TrialRow | None:
        return self.trial(self.best[0]) if self.best else None


def load(cfg: Config, study: optuna.Study) -> StudyData:
    finished = study.get_trials(deepcopy=False, states=st.FINISHED)
    unfinished: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        if t.state not in st.FINISHED:
            # A trial `autotune forget` took back is counted as such, not as a failure.
            name = "FORGOTTEN" if st.forgotten(t) else t.state.name
            unfinished[name] = unfinished.get(name, 0) + 1
    settings = study.user_attrs.get(records.STUDY_CONFIG) or cfg.summary()
    concurrency = [int(c) for c in settings.get("benchmark", {}).get("concurrency", [])]
    rows = [trial_row(t) for t in finished]
    return StudyData(
        name=study.study_name,
        storage=redact(cfg.study.storage),
        metric_names=list(
            study.metric_names or [f"value {i}" for i in range(len(study.directions))]
        ),
        knobs=[p.name for p in cfg.space.params.values() if not p.fixed],
        concurrency=concurrency or list(cfg.benchmark.concurrency),
        settings=settings,
        trials=rows,
        unfinished=unfinished,
        best=[t.number for t in st.best_trials(study)],
        n_trials=cfg.study.n_trials,
        min_running_requests=cfg.objective.constraints.min_running_requests,
        level_sample=_level_sample(rows),
        time=_time(cfg, study),
        workers=[w.sentence() for w in workers.liveness(study, cfg)],
        rehearsal_speedup=max(
            (speedup for t in finished if (speedup := records.TrialRecord.of(t).rehearsal_speedup)),
            default=None,
        ),
        performance_model=dict(study.user_attrs.get(records.STUDY_PERFORMANCE_MODEL) or {}),
        headline=_headline(study),
        warm_start=warm_start.sentences(study),
        **_validation(study.user_attrs.get(records.STUDY_FINALISTS)),
    )


def _headline(study: optuna.Study) -> deployments.Headline | None:
    best = st.best_trials(study)
    if len(best) != 1:
        return None
    return deployments.headline(study, best[0], st.baseline_trial(study))


def _time(cfg: Config, study: optuna.Study) -> str:
    from autotune.run import eta
    from autotune.search import estimate

    e = eta.of(cfg, study)
    if e is None:
        return ""
    return f"{estimate.sentence(e)} (a deployed trial took {estimate.duration(e.per_trial_s)})"


def _validation(attr: Any) -> dict[str, Any]:
    """The finalists' re-measurement, if the study has one (an older study has not)."""
    if not isinstance(attr, Mapping) or not isinstance(attr.get("finalists"), Mapping):
        return {}
    validation = {int(n): dict(v) for n, v in attr["finalists"].items() if isinstance(v, Mapping)}
    declared = attr.get("declared_best")
    return {
        "validation": validation,
        "declared_best": int(declared) if declared is not None else None,
    }


def trial_row(t: FrozenTrial) -> TrialRow:
    r = records.TrialRecord.of(t)
    levels = {int(lv["concurrency"]): dict(lv) for lv in r.levels}
    throughput = dict(r.output_tok_s)
    for c, lv in levels.items():
        if c not in throughput and lv.get("output_throughput") is not None:
            throughput[c] = float(lv["output_throughput"])
    return TrialRow(
        number=t.number,
        state=t.state.name,
        config=st.trial_config(t),
        values=None if t.values is None else tuple(t.values),
        feasible=st.is_feasible(t),
        baseline=r.baseline,
        reused_from=r.reused_from,
        throughput=dict(sorted(throughput.items())),
        levels=levels,
        max_running_requests=r.max_running_requests,
        failure=r.failure,
        reason=r.reason,
        # Only the named constraints: the list form optuna-dashboard reads repeats them as "0", "1".
        violated={
            k.removeprefix(records.CONSTRAINT_PREFIX): float(v)
            for k, v in t.system_attrs.items()
            if k.startswith(records.CONSTRAINT_PREFIX) and float(v) > 0
        },
        value_ci=r.value_ci,
        uncertain_levels=tuple(r.uncertain_levels),
        close_constraints=tuple(r.close_constraints),
        feasible_p=r.feasible_p,
        pruned=r.pruned if t.state == TrialState.PRUNED else None,
        predicted=r.failure == CAPACITY_PREDICTED,
        prediction=r.predicted,
        rates=tuple(sorted(r.rates, key=lambda x: float(x.get("rate") or 0))),
    )


def best_so_far(data: StudyData) -> list[list[float | None]]:
    """Per objective, the best feasible value after each finished trial (None before any)."""
    out: list[list[float | None]] = []
    for i in range(len(data.metric_names)):
        best: float | None = None
        series: list[float | None] = []
        for t in data.trials:
            if t.feasible and t.values is not None and (best is None or t.values[i] > best):
                best = t.values[i]
            series.append(best)
        out.append(series)
    return out


def schedule(data: StudyData) -> list[LevelBest]:
    """The best feasible config at each concurrency level: what to run at which load."""
    base = data.baseline
    rows = []
    for c in data.concurrency:
        candidates = [t for t in data.trials if t.feasible and t.measured and c in t.throughput]
        best = max(candidates, key=lambda t: (t.throughput[c], -t.number), default=None)
        base_tok_s = base.throughput.get(c) if base is not None and base.feasible else None
        rows.append(LevelBest(c, best, base_tok_s))
    return rows


def short(knob: str) -> str:
    """A knob's name for labels: SGLang's all start with speculative_."""
    return knob.removeprefix("speculative_")


def knob_values(trials: Sequence[TrialRow], knob: str) -> list[Any]:
    """The distinct values a knob took, sorted (numbers numerically, others as text)."""
    values = {t.config[knob] for t in trials if knob in t.config}
    return sorted(values, key=lambda v: (isinstance(v, str), v if isinstance(v, str) else float(v)))


#: Fields of a measured level that describe how it was measured rather than what it measured.
_MEASUREMENT_FIELDS = (
    "concurrency",
    "workload",
    "endpoint",
    "temperature",
    "ignore_eos",
    "max_tokens",
    "usage_source",
    "window",
)


def _level_sample(rows: Sequence[TrialRow]) -> dict[str, Any]:
    for t in rows:
        for lv in t.levels.values():
            return {k: lv[k] for k in _MEASUREMENT_FIELDS if k in lv}
    return {}
