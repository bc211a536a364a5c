"""autotune's GP sampler: the model, the inputs, the choices it may and may not make."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import optuna
import pytest
import yaml

from autotune.config import load_config
from autotune.search import gp, objective
from autotune.search import study as st
from autotune.search.gp.features import features
from autotune.search.gp.model import GP
from autotune.space import load_space, space_from_dict
from autotune.testservers.landscape import Cell, landscape
from tests.helpers.modelled import run_study

REPO = Path(__file__).resolve().parents[2]
EAGLE = load_space(REPO / "search_spaces" / "sglang-eagle.yaml")
MTP = load_space(REPO / "search_spaces" / "sglang-mtp.yaml")
STEPS, TOPK, DRAFT = EAGLE.order
QWEN = "qwen3.5-122b-a10b-mtp"


def chain(steps: int) -> dict[str, int]:
    return {STEPS: steps, TOPK: 1, DRAFT: steps + 1}


def test_model_recovers_a_smooth_function_and_knows_where_it_has_not_looked() -> None:
    X = np.linspace(0.0, 1.0, 8)[:, None]
    y = np.sin(3 * X[:, 0])
    model = GP.fit(X, y, prior_sd=1.0, noise_sd=(0.01,))
    mu, _ = model.predict(np.array([[0.5], [0.07]]))
    assert mu == pytest.approx(np.sin([1.5, 0.21]), abs=0.03)
    _, far = GP.fit(X[:3], y[:3], prior_sd=1.0).predict(np.array([[0.1], [0.9]]))
    assert far[1] > 2 * far[0]  # near the data it is sure, far from it it is not


def test_every_config_is_a_distinct_point_of_the_unit_cube() -> None:
    points = [tuple(features(EAGLE, c.params)) for c in EAGLE.enumerate()]
    assert len(set(points)) == len(points) == 427
    assert all(0.0 <= x <= 1.0 for p in points for x in p)
    # topk by rank; steps and draft tokens on the span of the whole space (draft 2-64, log)
    nine = pytest.approx(math.log(9 / 2) / math.log(64 / 2))
    assert features(EAGLE, {STEPS: 1, TOPK: 8, DRAFT: 9}) == [0.0, 1.0, nine]
    assert features(EAGLE, {STEPS: 8, TOPK: 2, DRAFT: 9}) == [1.0, pytest.approx(1 / 3), nine]


def test_the_sampler_deploys_no_config_twice_and_nothing_a_memory_failure_rules_out() -> None:
    # 10 of 427 configs leave the 16 running requests this objective asks for.
    study, server = run_study(Cell("sglang-eagle", QWEN, "natural", "geomean"), 20, seed=1)
    assert isinstance(study.sampler, gp.EnumeratedGPSampler)
    keys = [EAGLE.key(c) for c in server.deployed]
    assert len(set(keys)) == len(keys)
    ran_out: list[list[int]] = []
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("reused_from") is not None:
            continue  # answered from an earlier trial: nothing was deployed
        config = st.trial_config(t)
        knobs = [config[n] for n in EAGLE.memory_grows_with]
        assert not any(all(k >= r for k, r in zip(knobs, low, strict=True)) for low in ran_out)
        if t.user_attrs.get("failure") in ("capacity", "out_of_memory"):
            ran_out.append(knobs)
    assert ran_out  # the check above was exercised
    # With every config measured or ruled out, proposals are answered from earlier results
    # or from the capacity prediction (never wrongly: each one it skipped falls short).
    reused = [t for t in study.trials if t.user_attrs.get("reused_from") is not None]
    predicted = [t for t in study.trials if t.user_attrs.get("failure") == "capacity_predicted"]
    land = landscape(Cell("sglang-eagle", QWEN, "natural", "geomean"))
    assert not any(land.truth(st.trial_config(t)).feasible for t in predicted)
    assert len(server.deployed) < 20 and (reused or predicted)


def test_the_declared_best_is_the_models_pick_and_the_finalists_overrule_it() -> None:
    study, _ = run_study(Cell("sglang-eagle", QWEN, "natural", "c1"), 12, seed=2)
    picked = study.user_attrs[st.MODEL_BEST]
    assert st.best_trials(study)[0].number == picked
    assert st.is_feasible(study.trials[picked])
    assert st.chosen_by(study, study.trials[picked]) == "best by the model of every measurement"
    other = next(t for t in study.trials if st.is_feasible(t) and t.number != picked)
    study.set_user_attr("finalists", {"declared_best": other.number})
    assert st.best_trials(study)[0].number == other.number
    assert st.chosen_by(study, other).startswith("best after the finalists were measured again")


def measured_study(values: dict[int, float]) -> optuna.Study:
    """Chains of `steps` measured at the given tok/s, recorded as the daemon records them."""
    study = optuna.create_study(direction="maximize")
    for steps, value in values.items():
        trial = study.ask()
        config = chain(steps)
        score = objective.Score([value], {objective.SERVER_UP: 0.0})
        st.record(study, trial, score, {"config": config, "resolved": config})
    return study


def test_recommend_trusts_a_peak_its_neighbours_confirm_over_a_lone_lucky_draw() -> None:
    # A smooth hill at 3 steps; 6 steps drew a lucky benchmark, its neighbours say otherwise.
    hill = {1: 80.0, 2: 93.0, 3: 100.0, 4: 96.0, 5: 88.0, 6: 100.5, 7: 80.0, 8: 74.0}
    study = measured_study(hill)
    chosen = gp.recommend(EAGLE, study.trials)
    assert chosen is not None and st.trial_config(chosen) == chain(3)
    # Without the model, the lucky draw would be declared.
    assert max(study.trials, key=lambda t: t.value).number == 5


def test_recommend_ignores_infeasible_and_reused_trials() -> None:
    study = measured_study({2: 90.0, 3: 100.0, 4: 95.0})
    trial = study.ask()
    score = objective.Score([150.0], {objective.SERVER_UP: 0.0, objective.TTFT_P99: 12.0})
    st.record(study, trial, score, {"config": chain(5), "resolved": chain(5)})
    chosen = gp.recommend(EAGLE, study.trials)
    assert chosen is not None and chosen.number == 1


def test_auto_is_the_gp_on_a_listable_space_and_tpe_otherwise() -> None:
    cfg = load_config(REPO / "examples" / "demo.yaml")
    assert st.sampler_name(cfg) == "gp"
    data = yaml.safe_load((REPO / "search_spaces" / "sglang-mtp.yaml").read_text())
    data["params"]["mem_fraction_static"] = {
        "flag": "--mem-fraction-static",
        "type": "float",
        "low": 0.8,
        "high": 0.9,
    }
    floats = dataclasses.replace(cfg, space=space_from_dict(data, "floats.yaml"))
    assert st.sampler_name(floats) == "tpe"
    assert isinstance(st.make_sampler(floats), optuna.samplers.TPESampler)


def test_a_point_known_to_be_noisy_pulls_the_model_less() -> None:
    import numpy as np

    from autotune.search.gp.model import GP

    X = np.array([[0.0], [0.5], [1.0]])
    y = np.array([0.0, 1.0, 0.0])
    exact = GP.fit(X, y, prior_sd=1.0, noise_sd=(0.01,))
    noisy = GP.fit(X, y, prior_sd=1.0, noise_sd=(0.01,), point_sd=[0.0, 2.0, 0.0])
    at_middle = np.array([[0.5]])
    assert noisy.predict(at_middle)[0][0] < exact.predict(at_middle)[0][0] - 0.1
