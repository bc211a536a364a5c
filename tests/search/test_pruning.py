"""Pruning: a trial stopped after a level when it cannot plausibly beat the best so far."""

from __future__ import annotations

import dataclasses
import math

import optuna
import pytest
from optuna.trial import TrialState

from autotune.run import finalists
from autotune.search import gp, pruning
from autotune.search import study as st
from autotune.testservers.in_memory import in_memory_study
from autotune.testservers.landscape import Cell, landscape
from tests.helpers.modelled import run_study

LLAMA = "llama3.1-8b-eagle3-h100"


def _plan(best: float) -> pruning.LevelPlan:
    # The models expect 100 tok/s at each level (sd 2 %); the incumbent is worth `best`.
    models = {1: (math.log(100.0), 0.02), 16: (math.log(100.0), 0.02), 64: (math.log(100.0), 0.02)}
    return pruning.LevelPlan((1, 16, 64), models, (7, math.log(best)))


def test_a_level_far_below_stops_the_trial_and_a_close_one_does_not() -> None:
    plan = _plan(best=100.0)
    far = plan.verdict({1: 70.0})
    assert far is not None
    assert far.measured == (1,) and far.incumbent == 7 and far.p_beat < pruning.PRUNE_BELOW
    # The estimate: the measured level with the models' expectation for the others.
    assert far.estimate == pytest.approx((70.0 * 100.0 * 100.0) ** (1 / 3))
    assert plan.verdict({1: 97.0}) is None
    assert plan.verdict({1: 70.0, 16: 70.0, 64: 70.0}) is None  # every level: not pruned
    assert pruning.LevelPlan((1, 16, 64)).verdict({1: 1.0}) is None  # no models: never


def test_the_level_most_likely_to_settle_it_goes_first() -> None:
    # Expected 3 % short of the best, every level alike: the level the models know least
    # about is the one whose measurement can show it (the others would only confirm).
    best, mu = math.log(103.0), math.log(100.0)
    sure, unsure = 0.02, 0.10
    models = {1: (mu, sure), 16: (mu, sure), 64: (mu, unsure)}
    assert pruning.order((1, 16, 64), models, best)[0] == 64
    models = {1: (mu, unsure), 16: (mu, sure), 64: (mu, sure)}
    assert pruning.order((1, 16, 64), models, best)[0] == 1

    cell = Cell("sglang-eagle", LLAMA, "natural", "geomean")
    study = _study(cell, seed=3, deployments=8)
    cfg = landscape(cell).cfg
    deep = {"speculative_num_steps": 8, "speculative_eagle_topk": 8,
            "speculative_num_draft_tokens": 64}  # fmt: skip
    plan = pruning.plan(cfg, study, deep)
    assert plan.models is not None and plan.incumbent is not None
    assert plan.levels == pruning.order((1, 16, 64), plan.models, plan.incumbent[1])
    # Off, another objective, or too few trials: the configured order, nothing pruned.
    off = dataclasses.replace(cfg, study=dataclasses.replace(cfg.study, prune=False))
    assert pruning.plan(off, study, deep) == pruning.LevelPlan((1, 16, 64))
    # One level's objective: only it is modelled, and it runs first.
    single = dataclasses.replace(
        cfg, objective=dataclasses.replace(cfg.objective, mode="single", level=16)
    )
    alone = pruning.plan(single, study, deep)
    assert alone.models is not None and set(alone.models) == {16}
    assert alone.levels == (16, 1, 64)
    pareto = dataclasses.replace(cfg, objective=dataclasses.replace(cfg.objective, mode="pareto"))
    assert pruning.plan(pareto, study, deep).models is None
    fresh = in_memory_study(cfg, st.make_sampler(cfg))
    assert pruning.plan(cfg, fresh, deep).models is None


def test_a_pruned_trial_teaches_the_model_but_is_never_best_nor_a_finalist() -> None:
    cell = Cell("sglang-eagle", LLAMA, "natural", "geomean")
    study = _study(cell, seed=1, deployments=20)
    pruned = study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))
    assert pruned
    land = landscape(cell)
    for t in pruned:
        verdict = t.user_attrs[pruning.PRUNED]
        assert t.values == [pytest.approx(verdict["estimate"])]  # Optuna's last reported value
        assert gp.value_of(t) == pytest.approx(verdict["estimate"])
        assert t in gp.measured(study.trials)  # the sampler and the judge learn from it
        assert land.ratio(st.trial_config(t)) < 0.98  # nothing near the optimum was cut
        # Stopped after a level, before a level's second run, or inside a level's window.
        assert set(verdict["after_levels"]) <= {1, 16, 64}
        assert not st.is_feasible(t)
    numbers = {t.number for t in pruned}
    assert st.best_trials(study)[0].number not in numbers
    assert gp.recommend(land.cfg.space, study.trials).number not in numbers  # type: ignore[union-attr]
    top = finalists._top(land.cfg, study, "gp")
    assert top and not {t.number for t in top} & numbers


def test_a_pruned_config_proposed_again_is_answered_from_its_trial() -> None:
    cell = Cell("sglang-eagle", LLAMA, "natural", "geomean")
    study = _study(cell, seed=1, deployments=20)
    t = study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))[0]
    config = st.trial_config(t)
    assert st.find_measured(study, config) == t.number
    again = study.ask()
    copy = st.record_reuse(study, again, t.number)
    assert copy.state == TrialState.PRUNED
    assert copy.user_attrs[pruning.PRUNED] == t.user_attrs[pruning.PRUNED]
    assert copy not in gp.measured(study.trials)  # a copy teaches nothing twice


def _study(cell: Cell, seed: int, deployments: int) -> optuna.Study:
    return run_study(cell, deployments, seed)[0]
