"""The Optuna side: open or resume a study, propose configs, record results, find duplicates.

Knows nothing about HTTP, SSH or processes: it turns proposals into configs
(through the search space) and `TrialResult`s into Optuna trials.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.config import Config
from autotune.errors import AutotuneError
from autotune.log import get
from autotune.search import gp, objective, perf, pruning, records, warm_start
from autotune.search.constraints import keyed_constraints, write_legacy_constraints
from autotune.search.workers import (
    Repeating,
    boot_id,
    owner,
    owner_gone,
    rdb,
    recover_stale,
    requeue,
    running_trials,
)
from autotune.space import SearchSpace
from autotune.space import cast as space_cast
from autotune.store import optuna_private, storage

log = get("autotune.search.study")

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)

#: Study-level user attribute keys.
STUDY_CONFIG = records.STUDY_CONFIG
STUDY_BASELINE = records.STUDY_BASELINE
STUDY_BUDGET = records.STUDY_BUDGET

#: Trial-level user attribute keys that a reused result copies from the trial measured.
_COPIED = (
    records.LEVELS,
    records.MAX_RUNNING_REQUESTS,
    records.MAX_TOTAL_NUM_TOKENS,
    records.ACCEPT_LENGTH,
    records.FAILURE,
    records.REASON,
    records.WORKLOAD,
    records.SERVER_VERSION,
    records.DRAFT_ACCEPTANCE,
    records.VALUE_CI,
    records.UNCERTAIN_LEVELS,
    records.CONSTRAINTS_JUDGED,
    records.FEASIBLE_P,
    records.CLOSE_CONSTRAINTS,
    records.PRUNED,
    records.PREDICTED_MAX_RUNNING_REQUESTS,
    records.PREDICTED_INTERVAL,
    records.DEPLOYED,
    records.RATES,
    records.RATES_S,
    records.MAX_RATE_MEETING_SLO,
)
#: Prefixes of the per-level user attributes (`output_tok_s@c16`) a reused result copies.
_PER_LEVEL = (
    records.OUTPUT_TOK_S_AT,
    records.ACCEPT_LENGTH_AT,
    records.TTFT_P50_MS_AT,
    records.TTFT_P99_MS_AT,
    records.ITL_P50_MS_AT,
    records.CI_AT,
    records.GOODPUT_AT,
)


#: Random proposals before the model takes over, when study.startup_trials is not given.
#: The GP needs only two points besides the baseline; TPE's densities need more.
DEFAULT_STARTUP = {"gp": 2, "tpe": 6, "optuna-gp": 6}


def sampler_name(cfg: Config) -> str:
    """The sampler a study runs: `auto` is the GP for one objective on a listable space."""
    s = cfg.study.sampler
    if s != "auto":
        return s
    single = len(objective.metric_names(cfg.objective, cfg.benchmark.concurrency)) == 1
    return "gp" if single and cfg.space.enumerable() else "tpe"


def make_sampler(cfg: Config) -> optuna.samplers.BaseSampler:
    s = cfg.study
    name = sampler_name(cfg)
    startup = s.startup_trials if s.startup_trials is not None else DEFAULT_STARTUP.get(name, 0)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=s.seed)
    if name == "gp":
        # With the performance model, the baseline alone says where to look: random startup
        # proposals only while the model is off (or when the file asks for them).
        return gp.EnumeratedGPSampler(
            cfg.space,
            seed=s.seed,
            n_startup_trials=startup,
            target=performance_target(cfg),
            startup_when_modelled=s.startup_trials or 0,
        )
    if name == "optuna-gp":
        try:
            import torch  # noqa: F401 - GPSampler needs it; say so before the study starts
        except ImportError:
            raise AutotuneError(
                "study.sampler: optuna-gp needs PyTorch; "
                "install it with: pip install 'autotune[optuna-gp]'"
            ) from None
        return optuna.samplers.GPSampler(seed=s.seed, n_startup_trials=startup)
    # Constant liar: a proposal made while other workers measure counts their configs as
    # bad results, so simultaneous proposals spread out instead of piling on one region.
    return optuna.samplers.TPESampler(
        n_startup_trials=startup, multivariate=True, seed=s.seed, constant_liar=True
    )


def open_study(cfg: Config, *, create: bool = True) -> optuna.Study:
    """Open the study (creating it, or joining it as one more worker); `create=False` reads."""
    grace = cfg.study.heartbeat_grace
    db = storage.open_storage(
        cfg.study.storage,
        source=cfg.source,
        create=create,
        heartbeat_interval=max(1, grace // 5),
        grace_period=grace,
    )
    names = objective.metric_names(cfg.objective, cfg.benchmark.concurrency)
    if not create:
        try:
            return optuna.load_study(
                study_name=cfg.study.name, storage=db, sampler=make_sampler(cfg)
            )
        except KeyError:
            where = storage.redact(cfg.study.storage)
            raise AutotuneError(f"no study named {cfg.study.name!r} in {where}") from None
    study = optuna.create_study(
        storage=db,
        study_name=cfg.study.name,
        sampler=make_sampler(cfg),
        directions=["maximize"] * len(names),
        load_if_exists=True,
    )
    if len(study.directions) != len(names):
        raise AutotuneError(
            f"study {cfg.study.name!r} was created with {len(study.directions)} objective(s) "
            f"but objective.mode {cfg.objective.mode!r} has {len(names)}; use another study.name"
        )
    if study.metric_names != names:
        study.set_metric_names(names)
    study.set_user_attr(STUDY_CONFIG, cfg.summary())
    study.set_user_attr(records.STUDY_WORLD, warm_start.world(cfg))
    return study


def finished_count(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def with_budget(cfg: Config, asked: int | None, *, announce: bool = False) -> Config:
    """The config with the study's own total. `start --n-trials N` is stored with the
    study, so that a plain `start` (tmux, a unit's Restart=) and `status` keep N rather
    than going back to the file's `study.n_trials`, until another --n-trials says
    otherwise."""
    if asked is not None:
        study = open_study(cfg)
        study.set_user_attr(
            STUDY_BUDGET,
            {"n_trials": asked, "set_by": "--n-trials", "at": datetime.now(UTC).isoformat()},
        )
        return replace(cfg, study=replace(cfg.study, n_trials=asked))
    try:
        db = storage.open_storage(cfg.study.storage, source=cfg.source, create=False)
        attrs = db.get_study_user_attrs(db.get_study_id_from_name(cfg.study.name))
    except (AutotuneError, KeyError):
        return cfg  # no study yet, or not readable: the command says so itself
    stored = attrs.get(STUDY_BUDGET)
    if not isinstance(stored, dict) or not isinstance(stored.get("n_trials"), int):
        return cfg
    if stored["n_trials"] != cfg.study.n_trials and announce:
        log.info(
            "the study's total, set by --n-trials",
            n_trials=stored["n_trials"],
            set_at=stored.get("at"),
            config_n_trials=cfg.study.n_trials,
            hint=f"start --n-trials {cfg.study.n_trials} to use the config's",
        )
    return replace(cfg, study=replace(cfg.study, n_trials=stored["n_trials"]))


def remaining_budget(study: optuna.Study, n_trials: int) -> int:
    """Trials still to run so that the study holds n_trials finished trials in all."""
    return max(0, n_trials - finished_count(study))


# -- the baseline ----------------------------------------------------------------
@dataclass(frozen=True)
class Baseline:
    """The unit file's own flags, run first so every result has a reference."""

    params: dict[str, Any] | None  # study params to enqueue, or None: run the unit as is


def baseline_of(
    space: SearchSpace,
    current_flags: Mapping[str, str | None],
    environment: Mapping[str, str] | None = None,
) -> Baseline:
    """The unit's own config as study params, or Baseline(None) when the unit's values are
    not a config of the space (a knob missing, a companion file's content): run as is."""
    config: dict[str, Any] = {}
    for name in space.order:
        p = space.params[name]
        if not space.applies(name, config):
            continue
        if p.json is not None:
            found = _json_field(current_flags.get(p.flag), p.json.key)
            if found is None and p.flag not in current_flags and p.json.builtin is not None:
                found = p.json.builtin  # the flag left out: the field's "none" value
            try:
                config[name] = space_cast(p, found)
            except (TypeError, ValueError):
                return Baseline(None)  # not a value of this knob: run the unit as is
            continue
        if p.type == "bool" and p.env is None:
            config[name] = p.flag in current_flags
            continue
        if p.file is not None:
            if p.flag in current_flags or p.file.builtin is None:
                return Baseline(None)
            config[name] = p.file.builtin
            continue
        raw = (environment or {}).get(p.env) if p.env is not None else current_flags.get(p.flag)
        if raw is None:
            return Baseline(None)
        try:
            if p.type == "bool":
                config[name] = raw.strip().lower() in ("1", "true", "yes", "on")
            elif p.type == "int":
                config[name] = int(raw)
            else:
                config[name] = float(raw) if p.type == "float" else raw
        except ValueError:
            return Baseline(None)
    config = space.apply_rules(config)
    if space.check(config) is not None:
        return Baseline(None)
    return Baseline(space.encode(config))


def _json_field(text: str | None, key: str) -> Any:
    """One field of a JSON flag's value as the unit has it; None when it is not there."""
    try:
        obj = json.loads(text) if text else None
    except ValueError:
        return None
    value = obj.get(key) if isinstance(obj, dict) else None
    return None if isinstance(value, (dict, list)) else value


def enqueue_baseline_once(study: optuna.Study, baseline: Baseline) -> None:
    """Queue the unit's own config as the study's first trial (once, whichever worker is first)."""
    with _proposal_lock(study):
        if study.user_attrs.get(STUDY_BASELINE) or study.trials:
            return
        if baseline.params is not None:
            study.enqueue_trial(baseline.params, user_attrs={records.BASELINE: True})
        study.set_user_attr(STUDY_BASELINE, True)


def record_warm_start_once(study: optuna.Study, earlier: warm_start.Earlier) -> None:
    """Write where the new study started from, once (whichever worker of a fleet is first;
    a resumed study keeps its first)."""
    with _proposal_lock(study):
        if study.user_attrs.get(records.STUDY_WARM_START) is None:
            study.set_user_attr(records.STUDY_WARM_START, earlier.record())


def queue_warm_start_once(study: optuna.Study, cfg: Config) -> None:
    """Once the baseline is measured: check the earlier study against it (`warm_start.check`)
    and, where it holds, queue what a warm start deploys first: the earlier winner and the
    configs its study could not tell from it. Where the world moved, nothing is queued and
    the earlier points steer nothing (`warm_start.checked_holds`): the study runs as a cold
    one would. Under the proposal lock (`propose`): once for a fleet."""
    start = study.user_attrs.get(records.STUDY_WARM_START)
    if not start or start.get("queued") is not None:
        return
    base = next(
        (
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get(records.BASELINE) and t.user_attrs.get(records.REUSED_FROM) is None
        ),
        None,
    )
    if base is None:
        return  # not measured yet
    verdict = warm_start.check(start, base, pruning.agreement)
    log.info(verdict.sentence())
    baseline = trial_config(base)
    queued = []
    for config in warm_start.first_configs(start, cfg.benchmark.finalists) if verdict.holds else []:
        if cfg.space.check(config) is not None:
            continue  # not a config of this space any more (it was checked the same)
        if config == baseline:
            continue  # the baseline measured it already
        study.enqueue_trial(cfg.space.encode(config), user_attrs={records.WARM_FROM: True})
        queued.append(config)
    study.set_user_attr(
        records.STUDY_WARM_START, {**start, "queued": queued, "check": verdict.record()}
    )


def baseline_as_is_pending(study: optuna.Study, baseline: Baseline) -> bool:
    """True when the baseline is 'the unit unchanged' and has not run to completion yet."""
    if baseline.params is not None:
        return False
    return not any(
        t.user_attrs.get(records.BASELINE)
        for t in study.get_trials(deepcopy=False)
        if t.state != TrialState.FAIL
    )


# -- proposing, one worker at a time ----------------------------------------------------
@dataclass
class Proposal:
    """A trial asked for and its config: RUNNING in the study, this worker's to measure."""

    trial: optuna.Trial
    params: dict[str, Any] | None  # None: the unit file as it is
    baseline: bool
    position: int  # the study's count, for "trial 5 of 30" (finished + running, this one included)


def propose(
    study: optuna.Study, cfg: Config, baseline: Baseline, *, worker: str | None = None
) -> Proposal | None:
    """Ask the sampler for the next config, or None when the budget is spent or reserved.

    Under the study's proposal lock, so that with several workers the count of
    finished plus running trials never passes n_trials and each proposal sees
    every config being measured (the sampler steers away from them). Trials of
    workers that died are failed and their configs queued again first.
    """
    with _proposal_lock(study):
        recover_stale(study)
        queue_warm_start_once(study, cfg)
        running = len(running_trials(study))
        taken = finished_count(study) + running
        if taken >= cfg.study.n_trials:
            return None
        as_is = baseline_as_is_pending(study, baseline)
        trial = study.ask()
        trial.set_user_attr(records.OWNER, owner(worker))
        trial.set_user_attr(records.STARTED_AT, time.time())
        if as_is:
            params = None
            trial.set_user_attr(records.BASELINE, True)
        else:
            params = cfg.space.decode(cfg.space.suggest(trial))
            trial.set_user_attr(records.CONFIG, params)
        return Proposal(trial, params, bool(trial.user_attrs.get(records.BASELINE)), taken + 1)


def engine_of(study: optuna.Study) -> Any:
    """The SQLAlchemy engine of the study's database (None in memory): for the artifact table."""
    db = rdb(study)
    return db.engine if db is not None else None


def _proposal_lock(study: optuna.Study) -> contextlib.AbstractContextManager[None]:
    db = rdb(study)
    if db is None:  # the benchmark's in-memory study: one process, nothing to exclude
        return contextlib.nullcontext()
    return storage.proposal_lock(db, study.study_name)


def being_measured(study: optuna.Study, config: Mapping[str, Any], mine: int) -> int | None:
    """Number of another worker's running trial with this config (as proposed or resolved)."""
    wanted = dict(config)
    for t in running_trials(study):
        if t.number != mine and wanted in (
            t.user_attrs.get(records.CONFIG),
            t.user_attrs.get(records.RESOLVED),
        ):
            return t.number
    return None


def state_of(study: optuna.Study, number: int) -> TrialState:
    db = optuna_private.storage(study)
    tid = db.get_trial_id_from_study_id_trial_number(optuna_private.study_id(study), number)
    return db.get_trial(tid).state


def fail_and_requeue(
    study: optuna.Study, trial: optuna.Trial, *, failure: str, reason: str
) -> None:
    """Record a trial that was not the config's fault as FAIL, and queue its config again.

    FAIL trials neither count against n_trials nor teach TPE anything.
    """
    trial.set_user_attr(records.FAILURE, failure)
    trial.set_user_attr(records.REASON, reason[:500])
    study.tell(trial, state=TrialState.FAIL)
    requeue(study, trial)


# -- the end of the study: finalists measured by one worker ------------------------------
#: Study user attribute: which worker measures this budget's finalists, and when it last said so.
FINALISTS_CLAIM = records.STUDY_FINALISTS_CLAIM


def claim_finalists(study: optuna.Study, n_trials: int, worker: str | None) -> bool:
    """True if this worker is to measure the finalists (no live worker has claimed them)."""
    with _proposal_lock(study):
        claim = study.user_attrs.get(FINALISTS_CLAIM) or {}
        if claim.get("n_trials") == n_trials and not claim_gone(study, claim):
            return bool(claim.get("owner", {}).get("pid") == os.getpid() and _same_host(claim))
        study.set_user_attr(FINALISTS_CLAIM, _claim(n_trials, worker))
        return True


def holding_finalists_claim(
    study: optuna.Study, n_trials: int, worker: str | None, every: float
) -> Repeating:
    """While this worker measures the finalists, it renews its claim every `every` seconds."""
    return Repeating(
        every,
        lambda: study.set_user_attr(FINALISTS_CLAIM, _claim(n_trials, worker)),
        "renewing the finalists claim",
    )


def _claim(n_trials: int, worker: str | None) -> dict[str, Any]:
    return {"n_trials": n_trials, "owner": owner(worker), "beat": time.time()}


def _same_host(claim: Mapping[str, Any]) -> bool:
    o = claim.get("owner") or {}
    return o.get("host") == socket.gethostname() and o.get("boot_id") == boot_id()


def claim_gone(study: optuna.Study, claim: Mapping[str, Any]) -> bool:
    """The claiming worker died: on this host by its pid, elsewhere by a silence past the grace."""
    if owner_gone({records.OWNER: claim.get("owner")}):
        return True
    db = rdb(study)
    grace = db.grace_period if db is not None else None
    beat = claim.get("beat")
    return isinstance(beat, (int, float)) and grace is not None and time.time() - beat > grace


# -- duplicates --------------------------------------------------------------------
def find_measured(study: optuna.Study, config: Mapping[str, Any]) -> int | None:
    """Number of a finished trial that ran the same config (as proposed or as resolved);
    a pruned one counts: it is known not to win."""
    wanted = dict(config)
    for t in study.get_trials(deepcopy=False, states=FINISHED):
        if t.user_attrs.get(records.REUSED_FROM) is not None:
            continue
        # A proposal the server once adjusted will be adjusted the same way again.
        if wanted in (t.user_attrs.get(records.RESOLVED), t.user_attrs.get(records.CONFIG)):
            return t.number
    return None


def record_reuse(study: optuna.Study, trial: optuna.Trial, earlier: int) -> FrozenTrial:
    src = study.trials[earlier]
    for key in _COPIED:
        if key in src.user_attrs:
            trial.set_user_attr(key, src.user_attrs[key])
    for key, value in src.user_attrs.items():
        if key.startswith(_PER_LEVEL):
            trial.set_user_attr(key, value)
    trial.set_user_attr(records.REUSED_FROM, earlier)
    resolved = src.user_attrs.get(records.RESOLVED, src.user_attrs.get(records.CONFIG))
    trial.set_user_attr(records.RESOLVED, resolved)
    # The named constraints only: `src.constraints` also lists the dashboard's copy as "0", "1", ...
    constraints = keyed_constraints(src)
    for key, value in constraints.items():
        trial.set_constraint(key, value)
    write_legacy_constraints(study, optuna_private.trial_id(trial), constraints)
    trial.set_user_attr(records.FEASIBLE, all(v <= 0 for v in constraints.values()))
    if src.state == TrialState.PRUNED:
        return _tell_pruned(study, trial)
    return study.tell(trial, list(src.values or []))


def record(
    study: optuna.Study, trial: optuna.Trial, score: objective.Score, attrs: Mapping[str, Any]
) -> FrozenTrial:
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    for key, value in score.constraints.items():
        trial.set_constraint(key, value)
    write_legacy_constraints(study, optuna_private.trial_id(trial), score.constraints)
    return study.tell(trial, score.values)


def record_pruned(
    study: optuna.Study, trial: optuna.Trial, score: objective.Score, attrs: Mapping[str, Any]
) -> FrozenTrial:
    """A trial stopped after some levels: PRUNED, with the constraints of the levels it
    measured and its estimate as the last intermediate value (what TPE and the dashboard
    read of a pruned trial)."""
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    for key, value in score.constraints.items():
        trial.set_constraint(key, value)
    write_legacy_constraints(study, optuna_private.trial_id(trial), score.constraints)
    return _tell_pruned(study, trial)


def _tell_pruned(study: optuna.Study, trial: optuna.Trial) -> FrozenTrial:
    db = optuna_private.storage(study)
    verdict = db.get_trial(optuna_private.trial_id(trial)).user_attrs.get(records.PRUNED) or {}
    if isinstance(verdict.get("estimate"), (int, float)):
        trial.report(float(verdict["estimate"]), step=len(verdict.get("after_levels") or []))
    return study.tell(trial, state=TrialState.PRUNED)


# -- reading results -----------------------------------------------------------------
def is_feasible(t: FrozenTrial) -> bool:
    return t.state == TrialState.COMPLETE and all(v <= 0 for v in t.constraints.values())


#: Study user attribute: the trial the GP's posterior mean ranks first (see update_model_best).
MODEL_BEST = records.STUDY_MODEL_BEST


def performance_target(cfg: Config) -> perf.Target | None:
    """What the performance model predicts for this study, or None when it is off."""
    if not cfg.study.performance_model:
        return None
    o = cfg.objective
    return perf.Target(
        tuple(cfg.benchmark.concurrency), o.mode, o.level, o.constraints.min_running_requests
    )


def update_model_best(
    study: optuna.Study, space: SearchSpace, target: perf.Target | None = None
) -> int | None:
    """Record the feasible trial the model believes best, after a trial was measured.

    One benchmark is one noisy sample (a restarted server is 1-2 % faster or
    slower than the last time); the raw maximum over dozens of configs is
    biased towards a lucky draw. The GP pools each measurement with its
    neighbours', so its pick is what `best_trials` declares until the
    finalists have been measured again. Single objective on a listable space only.
    """
    if len(study.directions) != 1 or not space.enumerable():
        return None
    chosen = gp.recommend(space, study.get_trials(deepcopy=False), target)
    if chosen is not None and study.user_attrs.get(MODEL_BEST) != chosen.number:
        study.set_user_attr(MODEL_BEST, chosen.number)
    return chosen.number if chosen is not None else None


def baseline_trial(study: optuna.Study) -> FrozenTrial | None:
    """The unit as it was, measured and feasible: what every gain is counted against."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        if t.user_attrs.get(records.BASELINE) and t.user_attrs.get(records.REUSED_FROM) is None:
            return t if is_feasible(t) else None
    return None


def chosen_by(study: optuna.Study, t: FrozenTrial) -> str:
    """Why `best_trials` names `t`: what a person reading `autotune best` should know."""
    if len(study.directions) != 1:
        return "not dominated (Pareto front)"
    attrs = study.user_attrs
    if (attrs.get(records.STUDY_FINALISTS) or {}).get("declared_best") == t.number:
        return "best after the finalists were measured again (judged on every measurement)"
    if attrs.get(MODEL_BEST) == t.number:
        return "best by the model of every measurement"
    return "best measurement"


def best_trials(study: optuna.Study) -> list[FrozenTrial]:
    """Best feasible trial(s): one for a single objective, the Pareto front otherwise.

    For one objective: the finalists' winner once they were measured again,
    else the model's pick (`update_model_best`), else the best measurement.
    """
    feasible = [t for t in study.get_trials(deepcopy=False) if is_feasible(t)]
    if not feasible:
        return []
    if len(study.directions) == 1:
        attrs = study.user_attrs
        declared = (attrs.get(records.STUDY_FINALISTS) or {}).get("declared_best")
        validated = [t for t in feasible if t.number == declared]
        if validated:  # the judge's pick after the finalists were measured again
            return validated
        modelled = [t for t in feasible if t.number == attrs.get(MODEL_BEST)]
        if modelled:  # the best by the model of every measurement so far
            return modelled
        return [max(feasible, key=lambda t: (t.value, -t.number))]
    front = []
    for t in feasible:
        vals = t.values
        dominated = any(
            all(o >= v for o, v in zip(other.values, vals, strict=True))
            and any(o > v for o, v in zip(other.values, vals, strict=True))
            for other in feasible
        )
        if not dominated:
            front.append(t)
    return front


#: The config a trial ran: as the server resolved it, else as proposed.
trial_config = gp.config_of


def now() -> float:
    return time.time()


# -- forgetting what was recorded wrongly ------------------------------------------------
def forget(
    study: optuna.Study,
    numbers: list[int],
    *,
    kind: str | None = None,
    failed_since: Any = None,
    why: str = "autotune forget",
) -> list[int]:
    """Make the trials `numbers`, and the finished ones whose failure is `kind` and/or that
    failed at or after `failed_since` (a naive local datetime), FAIL with a `forgotten`
    record; trials that reused one of their results go with them. Each forgotten config is
    queued again (the unit as is needs no queue: it runs while no baseline is finished), so
    the study measures it anew; the budget counts them no more, the sampler and the report
    skip them. Returns the numbers forgotten. Refuses a study with a live worker, whose
    cache would keep the old results."""
    with _proposal_lock(study):
        recover_stale(study)
        live = running_trials(study)
        if live:
            who = (live[0].user_attrs.get(records.OWNER) or {}).get("host", "?")
            raise AutotuneError(
                f"the study is running (trial {live[0].number} on {who}): stop its workers "
                "(Ctrl-C, or systemctl stop) before forgetting trials"
            )
        trials = {t.number: t for t in study.get_trials(deepcopy=False)}
        unknown = [n for n in numbers if n not in trials]
        if unknown:
            raise AutotuneError(f"no trial {unknown[0]} in study {study.study_name!r}")
        for n in numbers:
            t = trials[n]
            if t.state in FINISHED:
                continue
            was = "forgotten already" if forgotten(t) else t.state.name
            failure = t.user_attrs.get(records.FAILURE)
            said = f"{was} ({failure})" if failure and not forgotten(t) else was
            raise AutotuneError(
                f"trial {n} is {said}: only a finished trial (COMPLETE or PRUNED) has a result "
                "to forget (a failed one holds none and counts against no budget)"
            )
        chosen = set(numbers)
        if kind is not None or failed_since is not None:
            for t in trials.values():
                if t.state not in FINISHED or records.FAILURE not in t.user_attrs:
                    continue
                if kind is not None and t.user_attrs.get(records.FAILURE) != kind:
                    continue
                done = t.datetime_complete
                if failed_since is not None and (done is None or done < failed_since):
                    continue
                chosen.add(t.number)
        chosen |= {
            t.number
            for t in trials.values()
            if t.state in FINISHED and t.user_attrs.get(records.REUSED_FROM) in chosen
        }
        when = time.time()
        for n in sorted(chosen):
            t = trials[n]
            record = {
                "at": when,
                "why": why,
                "was": t.state.name,
                "values": t.values,
                records.FAILURE: t.user_attrs.get(records.FAILURE),
            }
            optuna_private.forget_trial(study, t, record)
            if t.params and t.user_attrs.get(records.REUSED_FROM) is None:
                study.enqueue_trial(
                    dict(t.params),
                    user_attrs={
                        records.RETRY_OF: n,
                        records.BASELINE: bool(t.user_attrs.get(records.BASELINE)),
                    },
                    skip_if_exists=False,
                )
        return sorted(chosen)


def forgotten(t: FrozenTrial) -> dict[str, Any] | None:
    """The `forgotten` record of a trial `autotune forget` took back, else None."""
    record = t.user_attrs.get(records.FORGOTTEN)
    return record if isinstance(record, dict) else None
