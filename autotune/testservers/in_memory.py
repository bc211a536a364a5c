"""A study played in process: autotune's own worker loop on an in-memory Optuna study, with
a `Measure` that deploys nothing (`testservers/simulated.py`). What the tests of the search
and the experiments' efficiency tables run thousands of."""

from __future__ import annotations

import dataclasses
import warnings

import optuna

from autotune.config import Config
from autotune.run import worker
from autotune.search import objective, records, warm_start
from autotune.search import study as st


def in_memory_study(cfg: Config, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """What `study.open_study` builds, without a database (the storage plays no part here)."""
    names = objective.metric_names(cfg.objective, cfg.benchmark.concurrency)
    study = optuna.create_study(sampler=sampler, directions=["maximize"] * len(names))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(names)
    study.set_user_attr(records.STUDY_WORLD, warm_start.world(cfg))  # as open_study writes it
    return study


def run_to(
    cfg: Config, study: optuna.Study, measure: worker.Measure, baseline: st.Baseline, total: int
) -> worker.Tally:
    """autotune's own worker loop, until the study holds `total` finished trials."""
    budget = dataclasses.replace(cfg.study, n_trials=total)
    return worker.Worker(dataclasses.replace(cfg, study=budget), study, measure, baseline).run()
