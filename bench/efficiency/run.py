"""One study of one candidate on one cell with one seed, through autotune's own study loop."""

from __future__ import annotations

import random
from dataclasses import dataclass

import optuna

from autotune import daemon, objective
from autotune import study as st
from autotune.config import Config

from .candidates import CANDIDATES
from .cells import Cell, current_flags, landscape
from .simulated import SIM_NOISE, SimulatedServer

#: Proposals a study may spend on configs measured already before it counts as stuck.
MAX_TRIALS_PER_DEPLOYMENT = 5


@dataclass(frozen=True)
class Trace:
    """Per deployment (the baseline is deployment 1): what the study would declare best then."""

    best_ratio: tuple[float, ...]
    """True value of the best measured feasible trial, as a share of the optimum."""
    infeasible: tuple[bool, ...]
    """Whether that deployment was refused or infeasible."""
    trials: int
    """Study trials used (deployments plus proposals answered from earlier results)."""


def in_memory_study(cfg: Config, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """What `study.open_study` builds, without a database (the storage plays no part here)."""
    names = objective.metric_names(cfg.objective, cfg.benchmark.concurrency)
    study = optuna.create_study(sampler=sampler, directions=["maximize"] * len(names))
    study.set_metric_names(names)
    return study


def run_one(cell: Cell, candidate: str, seed: int, budget: int, noise: float = SIM_NOISE) -> Trace:
    land = landscape(cell)
    cand = CANDIDATES[candidate]
    cfg = configure_cfg(land.cfg, candidate, seed)
    study = in_memory_study(cfg, cand.sampler(cfg))
    baseline = st.baseline_of(cfg.space, current_flags())
    st.enqueue_baseline_once(study, baseline)
    for config in cand.first(cfg) if cand.first else []:
        study.enqueue_trial(cfg.space.encode(config), skip_if_exists=False)
    # The same seed draws the same noise for every candidate (common random numbers).
    server = SimulatedServer(land, random.Random(f"{cell}/{seed}"), noise)
    ratios: list[float] = []
    infeasible: list[bool] = []
    measured: set[tuple] = set()
    trials = 0
    while len(ratios) < budget and trials < budget * MAX_TRIALS_PER_DEPLOYMENT:
        if cand.only_first and not _waiting(study):
            break
        trials += 1
        before = len(server.deployed)
        daemon.run_trials(cfg, study, server, baseline, trials, artifacts=False)
        if len(server.deployed) == before:
            continue  # answered from an earlier trial: nothing deployed, nothing spent
        config = server.deployed[-1]
        measured.add(cfg.space.key(config))
        best = st.best_trials(study)
        ratios.append(land.ratio(st.trial_config(best[0])) if best else 0.0)
        infeasible.append(not land.truth(config).feasible)
        if len(measured) == land.size:
            break  # every config measured: nothing left to learn
    return Trace(tuple(ratios), tuple(infeasible), trials)


def configure_cfg(cfg: Config, candidate: str, seed: int) -> Config:
    from .candidates import configure

    return configure(CANDIDATES[candidate], cfg, seed)


def _waiting(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))
