"""One study of one candidate on one cell with one seed, through autotune's own study loop."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.config import Config
from autotune.run import finalists
from autotune.search import capacity, perf, records
from autotune.search import study as st
from autotune.testservers.in_memory import in_memory_study, run_to
from autotune.testservers.simulated import SIM_NOISE, SimulatedServer

from .candidates import CANDIDATES, Candidate, configure
from .cells import Cell, Landscape, baseline_flags, landscape

#: Proposals a study may spend on configs measured already before it counts as stuck.
MAX_TRIALS_PER_DEPLOYMENT = 5
#: Budgets at which the study's end is played out: finalists measured again, best applied.
APPLIED_AT = (15, 30)


@dataclass(frozen=True)
class Trace:
    """Per deployment (the baseline is deployment 1): what the study would declare best then."""

    best_ratio: tuple[float, ...]
    """True value of the declared best (`study.best_trials`), as a share of the optimum."""
    found_ratio: tuple[float, ...]
    """True value of the best config deployed so far: what a noise-free study would declare."""
    infeasible: tuple[bool, ...]
    """Whether that deployment was refused or infeasible."""
    trials: int
    """Study trials used (deployments plus proposals answered from earlier results)."""
    applied: tuple[float, ...] = ()
    """True value of what autotune would apply had the study ended after APPLIED_AT[i]
    deployments: the finalists' winner (`benchmark.finalists` measured again, at most
    `benchmark.finalist_rounds` rounds, as autotune's defaults)."""
    finalist_runs: tuple[int, ...] = ()
    """Deployments the finalist stage spent at each of APPLIED_AT."""
    gpu_s: tuple[float, ...] = ()
    """GPU-seconds spent by the end of each deployment (loads and levels, `cost.py`)."""
    skipped: int = 0
    """Configs the capacity prediction ruled out without deploying them."""
    wrongly_skipped: int = 0
    """Of those, configs that would have been feasible."""
    pruned: int = 0
    """Deployments stopped after some of their levels."""
    good_pruned: int = 0
    """Of those, configs worth 98 % of the optimum."""
    optimum_pruned: int = 0
    """Of those, the optimum itself."""
    seed: int = -1
    """The seed (candidates are compared seed by seed: the same seed draws the same noise)."""
    model_on: tuple[bool, ...] = ()
    """Per deployment after the baseline: whether the performance model steered it."""
    loo_rms: float | None = None
    """The model's last leave-one-out error (`perf.model.loo_error`), when it had one."""
    lost: tuple[float, ...] = ()
    """True worth (share of the optimum) of every config the study never measured because a
    prediction ruled it out: skipped by the capacity gate, or barred at the study's end by
    the sampler's chance of reaching the floor (0 when infeasible)."""


def run_one(cell: Cell, candidate: str, seed: int, budget: int, noise: float = SIM_NOISE) -> Trace:
    return play(cell, candidate, seed, budget, noise).trace


@dataclass(frozen=True)
class Played:
    trace: Trace
    study: optuna.Study
    cfg: Config


def play(
    cell: Cell,
    candidate: str,
    seed: int,
    budget: int,
    noise: float = SIM_NOISE,
    earlier: Mapping[str, Any] | None = None,
) -> Played:
    """One study, and the study itself (what a later `start --from` reads). `earlier`: a
    warm start's record (`warm_start.Earlier.record()`), as `start --from` writes it on the
    new study before its first deployment."""
    land = landscape(cell)
    noise = land.noise if land.noise is not None else noise
    cand = CANDIDATES[candidate]
    cfg = configure(cand, land.cfg, seed)
    study = in_memory_study(cfg, cand.sampler(cfg))
    baseline = st.baseline_of(cfg.space, baseline_flags(cell))
    st.enqueue_baseline_once(study, baseline)
    if earlier is not None:
        study.set_user_attr(records.STUDY_WARM_START, dict(earlier))
    start = cfg.space.decode(baseline.params) if baseline.params is not None else None
    for config in cand.first(cfg, start) if cand.first else []:
        if config != start:
            study.enqueue_trial(cfg.space.encode(config), skip_if_exists=False)
    # The same seed draws the same noise for every candidate (common random numbers).
    server = SimulatedServer(
        land, random.Random(f"{cell}/{seed}"), noise, endpoint=cfg.benchmark.endpoint
    )
    ratios: list[float] = []
    found: list[float] = []
    infeasible: list[bool] = []
    measured: set[tuple] = set()
    applied: list[float] = []
    runs: list[int] = []
    gpu_s: list[float] = []
    tally = {"skipped": 0, "wrongly_skipped": 0, "pruned": 0, "good_pruned": 0, "optimum": 0}
    skipped: list[float] = []
    model_on: list[bool] = []
    trials = 0
    while len(ratios) < budget and trials < budget * MAX_TRIALS_PER_DEPLOYMENT:
        if cand.only_first and not _waiting(study):
            break
        trials += 1
        before = len(server.deployed)
        run_to(cfg, study, server, baseline, trials)
        last = _latest(study)
        if last.user_attrs.get("failure") == capacity.FAILURE:
            tally["skipped"] += 1
            tally["wrongly_skipped"] += land.truth(st.trial_config(last)).feasible
            skipped.append(land.ratio(st.trial_config(last)))
        if len(server.deployed) == before:
            continue  # answered from an earlier trial or predicted: nothing deployed or spent
        config = server.deployed[-1]
        status = study.user_attrs.get(records.STUDY_PERFORMANCE_MODEL) or {}
        if ratios:
            model_on.append(bool(status.get("on")))
        gpu_s.append(server.gpu_seconds[-1] * server.cost.gpus + (gpu_s[-1] if gpu_s else 0.0))
        if last.state == optuna.trial.TrialState.PRUNED:
            tally["pruned"] += 1
            tally["good_pruned"] += land.ratio(config) >= 0.98 - 1e-12
            tally["optimum"] += land.ratio(config) >= 1.0 - 1e-9
        measured.add(cfg.space.key(config))
        best = _raw_best(study) if cand.raw_best else st.best_trials(study)
        ratios.append(land.ratio(st.trial_config(best[0])) if best else 0.0)
        found.append(max(land.ratio(config), found[-1] if found else 0.0))
        infeasible.append(not land.truth(config).feasible)
        if len(ratios) in APPLIED_AT:
            end = f"{cell}/{seed}/{trials}"
            ratio, spent = _after_finalists(cfg, study, land, end, noise, cand)
            applied.append(ratio)
            runs.append(spent)
        if len(measured) == land.size:
            break  # every config measured: nothing left to learn
    while len(applied) < len(APPLIED_AT):  # the study ran out of configs: its end is now
        ratio, spent = _after_finalists(cfg, study, land, f"{cell}/{seed}/end", noise, cand)
        applied.append(ratio)
        runs.append(spent)
    trace = Trace(
        tuple(ratios),
        tuple(found),
        tuple(infeasible),
        trials,
        tuple(applied),
        tuple(runs),
        tuple(gpu_s),
        tally["skipped"],
        tally["wrongly_skipped"],
        tally["pruned"],
        tally["good_pruned"],
        tally["optimum"],
        seed,
        tuple(model_on),
        (study.user_attrs.get(records.STUDY_PERFORMANCE_MODEL) or {}).get("loo_rms"),
        tuple(skipped) + _barred(cfg, study, land),
    )
    return Played(trace, study, cfg)


def _barred(cfg: Config, study: optuna.Study, land: Landscape) -> tuple[float, ...]:
    """The true worth of each config the sampler would never propose at the study's end: no
    chance of reaching the floor by the memory rule over the deployments (`gp/sampler.py`)."""
    target = st.performance_target(cfg)
    model, _ = perf.build(cfg.space, target, study.get_trials(deepcopy=False))
    floor = target.floor if target is not None else None
    if model is None or floor is None or not model.capacity_points:
        return ()
    measured = {cfg.space.key(st.trial_config(t)) for t in study.get_trials(deepcopy=False)}
    out = []
    for c in cfg.space.enumerate():
        if not c.valid or cfg.space.key(c.params) in measured:
            continue
        m = cfg.space.memory_tokens(c.params)
        points = model.points_for(c.params) if m is not None else ()
        if points and capacity.chance_reaches(points, m, floor) == 0.0:
            out.append(land.ratio(c.params))
    return tuple(out)


def _after_finalists(
    cfg: Config, study: optuna.Study, land: Landscape, seed: str, noise: float, cand: Candidate
) -> tuple[float, int]:
    """Play out autotune's end of study (finalists.validate), judge its pick, then undo it.

    Returns the true worth of what it would apply and the deployments it spent."""
    server = SimulatedServer(land, random.Random(seed), noise)
    declared = finalists.validate(
        cfg, study, lambda params: server(params, lambda _config: None), judge=cand.judge
    )
    study.set_user_attr(finalists.FINALISTS, None)
    best = [study.trials[declared]] if declared is not None else st.best_trials(study)
    return (land.ratio(st.trial_config(best[0])) if best else 0.0), len(server.deployed)


def _raw_best(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    feasible = [t for t in study.get_trials(deepcopy=False) if st.is_feasible(t)]
    return [max(feasible, key=lambda t: (t.value, -t.number))] if feasible else []


def _latest(study: optuna.Study) -> optuna.trial.FrozenTrial:
    """The trial finished last (enqueued trials keep the lower numbers they were made with)."""
    done = study.get_trials(deepcopy=False, states=st.FINISHED)
    return max(done, key=lambda t: (t.datetime_complete, t.number))


def _waiting(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))
