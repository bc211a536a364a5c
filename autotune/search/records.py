"""The trial record: what a study keeps of each trial, and of itself. The one schema.

A trial's record is its Optuna user attributes (and two system attributes Optuna writes).
`run/`, `search/`, `report/`, `commands/` and `cli.py` all read it; this module owns its
keys, so that a key is spelled once. Optuna keeps its attribute keys as constants of the
module that writes them; here every writer shares one module because every reader does.

Trial keys (user attributes), with their type, unit and writer:

========================= ============================================ =====================
key                       type (unit)                                   written by
========================= ============================================ =====================
config                    {param: value}: the config proposed           search/study.propose
resolved                  {param: value}: as the server resolved it     run/trial.run
baseline                  bool: the unit as it was                      search/study (enqueue)
owner                     {host, pid, boot_id, worker?}                 search/study.propose
started_at                float (epoch seconds)                         search/study.propose
progress                  str: the worker's status line, every 5 s      search/study
retry_of                  int: the trial this one measures again        search/study (enqueue)
reused_from               int: the trial whose result this one copies   search/study.record_reuse
forgotten                 {at, why, was, values, failure}               search/study.forget
warm_from                 true: queued first by a warm start            search/study (warm)
workload                  str: the workload's name                      run/trial.run
startup_s                 float (s): restart to ready                   run/trial.run
levels                    [LevelResult.to_dict()]: one per level        run/trial.run
output_tok_s@c{C}         float (tok/s) at concurrency C                run/trial.run
accept_length@c{C}        float (tokens per step) at C                  run/trial.run
ttft_p50_ms@c{C}          float (ms)                                    run/trial.run
ttft_p99_ms@c{C}          float (ms)                                    run/trial.run
itl_p50_ms@c{C}           float (ms)                                    run/trial.run
ci@c{C}                   float (share): the level's 95 % half-width    run/trial.run
accept_length             float (tokens per step): mean over levels     run/trial.run
draft_acceptance          float (share)                                 run/trial.run
degenerate_share          float (share): the most over levels           run/trial.run
adaptive_saved_s          float (s)                                     run/trial.run
value_ci                  float (share): the value's 95 % half-width    run/trial.run
uncertain_levels          [C]: missed the CI target twice               run/trial.run
constraints_judged        {name: {statistic, limit, value, ...}}        run/trial.run
feasible_p                float (probability)                           run/trial.run
close_constraints         [name]: either side of the limit by chance    run/trial.run
feasible                  bool                                          run/trial.run
failure                   str: the kind (`errors`, capacity, ...)       run/trial, search/*
reason                    str: the failure in a person's words          run/trial, search/*
max_running_requests      int: what the server runs at once             run/trial.run
max_total_num_tokens      int (tokens): its KV pool                     run/trial.run
server_version            str                                           run/trial.run
rehearsal_speedup         float: the simulator's time scale             run/trial.run
files                     {path: text | None}: companion files          run/trial.run
pruned                    {after_levels, when, estimate, p_beat, ...}   run/trial.run
predicted                 {value, sd, output_tok_s, accept_length, ...} search/gp/sampler
predicted_max_running_requests  float                                   search/capacity
predicted_interval        [low, high]                                   search/capacity
deployed                  False: never deployed (capacity predicted)    search/capacity
rates                     [RateResult.to_dict()]                        run/rates
goodput@{R}/s             float (tok/s) at request rate R               run/rates
rates_s                   float (s)                                     run/rates
max_rate_meeting_slo      float (req/s)                                 run/rates
first_attempt             {failure, reason}: before a crash confirmed   run/worker
crash_confirmed           bool                                          run/worker
load_phase                PhaseResult.to_dict()                         run/trial (finalists)
========================= ============================================ =====================

System attributes Optuna writes: `constraints` (list, the dashboard's), `constraints:NAME`
(each constraint's value, positive when violated), `fixed_params` (an enqueued trial's).

Study keys (study user attributes): `autotune_config` (the config summary it ran with),
`baseline_enqueued`, `budget` ({n_trials, set_by, at}), `finalists` (the finalist stage's
record: declared_best, rounds, runs, per finalist {first, values, estimate, p_best, ...},
baseline {trial, values}), `finalists_claim`, `model_best` (int), `performance_model`
({on, fitted_on, loo_rms?, reason?}), `adaptive_export`, `adaptive_probes`, `world`
(what its measurements depend on besides the config: engine, space, the unit's other flags,
workload, levels, objective; `search/warm_start.world`), `warm_start` (the earlier study a
`start --from` read: from, storage, at, best, differences, measured; once the new
baseline was measured, queued and check {holds, why, trial}: `search/warm_start.check`),
`host_checks` (by worker, `apply --check` on that host: trial, metric, earlier,
earlier_host, here, margin, why_not, holds, at; `run/host_check.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from optuna.trial import FrozenTrial, TrialState

# -- trial keys -----------------------------------------------------------------------------
CONFIG = "config"
RESOLVED = "resolved"
BASELINE = "baseline"
OWNER = "owner"
STARTED_AT = "started_at"
PROGRESS = "progress"
RETRY_OF = "retry_of"
REUSED_FROM = "reused_from"
FORGOTTEN = "forgotten"
WARM_FROM = "warm_from"
WORKLOAD = "workload"
STARTUP_S = "startup_s"
LEVELS = "levels"
ACCEPT_LENGTH = "accept_length"
DRAFT_ACCEPTANCE = "draft_acceptance"
DEGENERATE_SHARE = "degenerate_share"
ADAPTIVE_SAVED_S = "adaptive_saved_s"
VALUE_CI = "value_ci"
UNCERTAIN_LEVELS = "uncertain_levels"
CONSTRAINTS_JUDGED = "constraints_judged"
FEASIBLE_P = "feasible_p"
CLOSE_CONSTRAINTS = "close_constraints"
FEASIBLE = "feasible"
FAILURE = "failure"
REASON = "reason"
MAX_RUNNING_REQUESTS = "max_running_requests"
MAX_TOTAL_NUM_TOKENS = "max_total_num_tokens"
SERVER_VERSION = "server_version"
REHEARSAL_SPEEDUP = "rehearsal_speedup"
FILES = "files"
PRUNED = "pruned"
PREDICTED = "predicted"
PREDICTED_MAX_RUNNING_REQUESTS = "predicted_max_running_requests"
PREDICTED_INTERVAL = "predicted_interval"
DEPLOYED = "deployed"
RATES = "rates"
RATES_S = "rates_s"
MAX_RATE_MEETING_SLO = "max_rate_meeting_slo"
FIRST_ATTEMPT = "first_attempt"
CRASH_CONFIRMED = "crash_confirmed"
LOAD_PHASE = "load_phase"

#: Per-level keys: `output_tok_s@c16`; rates: `goodput@2/s`.
OUTPUT_TOK_S_AT = "output_tok_s@c"
ACCEPT_LENGTH_AT = "accept_length@c"
TTFT_P50_MS_AT = "ttft_p50_ms@c"
TTFT_P99_MS_AT = "ttft_p99_ms@c"
ITL_P50_MS_AT = "itl_p50_ms@c"
CI_AT = "ci@c"
GOODPUT_AT = "goodput@"

#: System attributes Optuna writes: each constraint's value under this prefix; an enqueued
#: trial's params.
CONSTRAINT_PREFIX = "constraints:"
FIXED_PARAMS = "fixed_params"

# -- study keys -----------------------------------------------------------------------------
STUDY_CONFIG = "autotune_config"
STUDY_BASELINE = "baseline_enqueued"
STUDY_BUDGET = "budget"
STUDY_FINALISTS = "finalists"
STUDY_FINALISTS_CLAIM = "finalists_claim"
STUDY_MODEL_BEST = "model_best"
STUDY_PERFORMANCE_MODEL = "performance_model"
STUDY_ADAPTIVE_EXPORT = "adaptive_export"
STUDY_ADAPTIVE_PROBES = "adaptive_probes"
STUDY_WORLD = "world"
STUDY_WARM_START = "warm_start"
STUDY_HOST_CHECKS = "host_checks"


def at(prefix: str, concurrency: int) -> str:
    """A per-level key: `at(OUTPUT_TOK_S_AT, 16)` is `output_tok_s@c16`."""
    return f"{prefix}{concurrency}"


def per_level(attrs: Mapping[str, Any], prefix: str) -> dict[int, float]:
    """Every level's value of a per-level key, by concurrency."""
    out: dict[int, float] = {}
    for key, value in attrs.items():
        level = key[len(prefix) :]
        if key.startswith(prefix) and level.isdigit() and isinstance(value, (int, float)):
            out[int(level)] = float(value)
    return out


@dataclass(frozen=True)
class TrialRecord:
    """One trial's record, typed: what every reader needs, read once."""

    number: int
    config: dict[str, Any]
    """As the server resolved it, else as proposed (empty: the unit as it is, not known)."""
    baseline: bool
    reused_from: int | None
    retry_of: int | None
    forgotten: dict[str, Any] | None
    failure: str | None
    reason: str | None
    levels: list[dict[str, Any]] = field(default_factory=list)
    output_tok_s: dict[int, float] = field(default_factory=dict)
    accept_length: float | None = None
    value_ci: float | None = None
    uncertain_levels: list[int] = field(default_factory=list)
    close_constraints: list[str] = field(default_factory=list)
    feasible_p: float | None = None
    max_running_requests: int | None = None
    max_total_num_tokens: int | None = None
    rehearsal_speedup: float | None = None
    pruned: dict[str, Any] | None = None
    predicted: dict[str, Any] | None = None
    deployed: bool = True
    owner: dict[str, Any] = field(default_factory=dict)
    progress: str | None = None
    rates: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, t: FrozenTrial) -> TrialRecord:
        a = t.user_attrs
        config = a.get(RESOLVED) or a.get(CONFIG) or {}
        return cls(
            number=t.number,
            config=dict(config) if isinstance(config, Mapping) else {},
            baseline=bool(a.get(BASELINE)),
            reused_from=_int(a.get(REUSED_FROM)),
            retry_of=_int(a.get(RETRY_OF)),
            forgotten=a.get(FORGOTTEN) if isinstance(a.get(FORGOTTEN), dict) else None,
            failure=_str(a.get(FAILURE)),
            reason=_str(a.get(REASON)),
            levels=list(a.get(LEVELS) or []),
            output_tok_s=per_level(a, OUTPUT_TOK_S_AT),
            accept_length=_float(a.get(ACCEPT_LENGTH)),
            value_ci=_float(a.get(VALUE_CI)),
            uncertain_levels=[int(c) for c in a.get(UNCERTAIN_LEVELS) or []],
            close_constraints=[str(c) for c in a.get(CLOSE_CONSTRAINTS) or []],
            feasible_p=_float(a.get(FEASIBLE_P)),
            max_running_requests=_int(a.get(MAX_RUNNING_REQUESTS)),
            max_total_num_tokens=_int(a.get(MAX_TOTAL_NUM_TOKENS)),
            rehearsal_speedup=_float(a.get(REHEARSAL_SPEEDUP)),
            pruned=a.get(PRUNED) if isinstance(a.get(PRUNED), dict) else None,
            predicted=a.get(PREDICTED) if isinstance(a.get(PREDICTED), dict) else None,
            deployed=a.get(DEPLOYED) is not False,
            owner=dict(a.get(OWNER) or {}),
            progress=_str(a.get(PROGRESS)),
            rates=[r for r in a.get(RATES) or () if isinstance(r, dict)],
        )


# -- readers the sampler, the pruner, the capacity model and the report share --------------
def config_of(t: FrozenTrial) -> dict[str, Any]:
    """The config a trial ran: as the server resolved it, else as proposed."""
    return dict(t.user_attrs.get(RESOLVED) or t.user_attrs.get(CONFIG) or {})


def measured(trials: Sequence[FrozenTrial]) -> list[FrozenTrial]:
    """Trials that ran a config: complete ones, and pruned ones with their estimate (copies
    of an earlier result excluded)."""
    return [
        t
        for t in trials
        if (
            t.state == TrialState.COMPLETE
            or (t.state == TrialState.PRUNED and isinstance(t.user_attrs.get(PRUNED), dict))
        )
        and t.user_attrs.get(REUSED_FROM) is None
        and config_of(t)
    ]


def value_of(t: FrozenTrial) -> float | None:
    """The single objective value the model learns from: a complete trial's value; for a
    pruned one, the estimate from the levels it measured (autotune/search/pruning.py)."""
    if t.state == TrialState.PRUNED:
        pruned = t.user_attrs.get(PRUNED)
        estimate = pruned.get("estimate") if isinstance(pruned, dict) else None
        return float(estimate) if isinstance(estimate, (int, float)) else None
    return float(t.values[0]) if t.values and len(t.values) == 1 else None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
