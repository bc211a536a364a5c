"""Issue 50: where the performance model was wrong on a real server, found by reading it.

1. Capacity evidence comes only from configs that differ in the knobs the reservation
   depends on: a deployment that fell short of the floor at a low `mem_fraction_static` had
   a smaller pool; it says nothing of a config at a higher one.
2. The acceptance sd grows with the distance from what was deployed: on an endpoint that
   gives only a mean accept length, the deployed chain is the one known best; a tree wider or
   narrower than every tree deployed is known less well than one of a deployed width.
3. Leave-one-out holds out whole shapes.
4. The model's error is learnt where it was measured: the GP's posterior around the model's
   prediction does not keep the model's whole sd beside a measurement (found in the
   efficiency table: eagle llama greedy c1 stepped along draft tokens one at a time).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import optuna
import pytest
import yaml

from autotune.search import capacity, objective
from autotune.search import study as st
from autotune.search.gp.sampler import Posterior
from autotune.search.perf.acceptance import (
    SD_MEASURED,
    SD_PER_EXTRAPOLATED,
    SD_TREE_PER_DOUBLING,
    Acceptance,
    Seen,
)
from autotune.search.perf.model import Deployed, PerfModel, Target, held_out
from autotune.space import space_from_dict
from tests.helpers.e2e import REPO


def _space():  # type: ignore[no-untyped-def]
    data = yaml.safe_load((REPO / "search_spaces" / "sglang-eagle.yaml").read_text())
    data["params"]["mem_fraction_static"] = {
        "flag": "--mem-fraction-static",
        "type": "float",
        "choices": [0.7, 0.9],
    }
    return space_from_dict(data, "eagle-with-memory.yaml")


def _deployed(number: int, steps: int, topk: int, draft: int, mem: float, running: int):  # type: ignore[no-untyped-def]
    space = _space()
    config = {
        "speculative_num_steps": steps,
        "speculative_eagle_topk": topk,
        "speculative_num_draft_tokens": draft,
        "mem_fraction_static": mem,
    }
    levels = tuple(
        {"concurrency": c, "output_throughput": 100.0 * c**0.5, "accept_length": 1.0 + steps * 0.4}
        for c in (1, 16)
    )
    return Deployed(
        number, config, (steps, topk, draft), running, space.memory_tokens(config), levels, None
    )


def test_a_shortfall_at_a_smaller_pool_does_not_bar_a_config_at_a_larger_one() -> None:
    space = _space()
    target = Target(levels=(1, 16), mode="geomean", floor=16)
    # Both at mem 0.7: the chain ran 18 at once, the tree 3 (short of 16).
    deployed = [_deployed(0, 3, 1, 4, 0.7, 18), _deployed(1, 3, 4, 8, 0.7, 3)]
    model = PerfModel.fit(space, target, deployed)
    assert isinstance(model, PerfModel)
    tree_high = {**deployed[1].config, "mem_fraction_static": 0.9}
    tree_low = dict(deployed[1].config)
    m = space.memory_tokens(tree_high)
    assert m is not None
    # Before: every deployment was evidence, and the tree at 0.7 barred the tree at 0.9.
    assert capacity.chance_reaches(model.capacity_points, m, 16) == 0.0
    # Now: nothing was deployed at 0.9, so nothing bars it; at 0.7 the shortfall still does.
    assert model.points_for(tree_high) == ()
    assert model.running(tree_high) == (None, 0.0)
    assert capacity.chance_reaches(model.points_for(tree_low), m, 16) == 0.0
    # And the prediction of each is its own, not the other's from the cache.
    low, high = model.predict(tree_low), model.predict(tree_high)
    assert low is not None and high is not None and low.running == 3.0 and high.running is None


def test_the_deployed_chain_is_known_best_and_a_depth_none_ran_is_not() -> None:
    """After a (3, 1, 4) baseline on the chat endpoint (a mean accept length, no
    per-position counts), the deployed depth-3 chain got sd 9 % (its real error 0.07 %) and
    a never-deployed depth-1 chain sd 1 % (its real error -4.5 %)."""
    model = Acceptance.fit([Seen(3, 1, 4, 2.6)])
    assert model is not None and not model.measured_reach
    deployed, shallower, deeper = (
        model.relative_sd(3, 1, 4),
        model.relative_sd(1, 1, 2),
        model.relative_sd(5, 1, 6),
    )
    assert deployed == SD_MEASURED
    assert shallower > 5 * deployed and deeper > 5 * deployed
    assert model.relative_sd(2, 1, 3) < shallower  # one position away, not two


def test_a_depth_a_tree_reached_is_not_extrapolated_from_the_chains_alone() -> None:
    """The distance to the nearest deployed depth counted chains only: after a (3, 1, 4)
    baseline and a (6, 4, 18) tree, an 8-step chain was five positions out (sd 21 %), and
    the study kept deploying deep chains to learn what the tree had measured (efficiency
    table, eagle qwen greedy c1: median 13 deployments to 98 %, 9 with trees counted)."""
    model = Acceptance.fit([Seen(3, 1, 4, 3.9), Seen(6, 4, 18, 5.6)])
    assert model is not None and model.chain_depths == (3,)
    chain = model.relative_sd(8, 1, 9)
    assert chain == pytest.approx(SD_MEASURED + 2 * SD_PER_EXTRAPOLATED)
    # A depth the tree reached is one position from what was measured, not three.
    assert model.relative_sd(6, 1, 7) == pytest.approx(SD_MEASURED + SD_PER_EXTRAPOLATED)
    only_chain = Acceptance.fit([Seen(3, 1, 4, 3.9)])
    assert only_chain is not None and only_chain.relative_sd(8, 1, 9) > chain


def test_a_tree_wider_than_any_deployed_is_not_known_as_well_as_the_deployed_width() -> None:
    """omega is one number fitted where trees ran; the rank law it stands for is the model's
    own. After a topk-4 tree, a topk-8 one is an extrapolation (in the efficiency table
    eagle llama greedy c1 stalled on topk-4 trees at 97.4-97.8 % of an optimum at topk 8)."""
    model = Acceptance.fit([Seen(3, 1, 4, 2.6), Seen(5, 4, 21, 3.9)])
    assert model is not None and model.trees_seen == 1
    same, wider, widest = (
        model.relative_sd(6, 4, 25),
        model.relative_sd(6, 2, 25),
        model.relative_sd(6, 8, 49),
    )
    assert same < wider == widest  # one doubling either way
    assert model.relative_sd(6, 8, 49) - same == pytest.approx(SD_TREE_PER_DOUBLING)
    # Before any tree, every width is the prior's.
    chains_only = Acceptance.fit([Seen(3, 1, 4, 2.6)])
    assert chains_only is not None
    assert chains_only.relative_sd(6, 8, 49) > model.relative_sd(6, 8, 49)


def test_leave_one_out_leaves_the_whole_shape_out() -> None:
    """The configs the model steered to, deployed again, vouched for their own shape: the
    check could not see a wrong extrapolation to a shape it avoided."""
    deployed = [
        _deployed(0, 3, 1, 4, 0.7, 18),
        _deployed(1, 2, 1, 3, 0.7, 18),
        _deployed(2, 3, 1, 4, 0.9, 20),  # the same shape deployed again
    ]
    assert [d.number for d in held_out(deployed, 2)] == [1]
    assert [d.number for d in held_out(deployed, 1)] == [0, 2]


class _SureOfNothing:
    """A model that predicts 100 tok/s everywhere with a 10 % sd (the one function under
    test is the posterior's use of a model's sd, not a model)."""

    def predict_many(
        self, configs: Sequence[Mapping[str, Any]]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        return np.full(len(configs), math.log(100.0)), np.full(len(configs), 0.10)


def test_the_models_error_is_learnt_beside_a_measurement() -> None:
    """After one tree measured 5 % below the model, the tree with one more draft token is
    known nearly as well as the measured one; a config far from it keeps the model's sd.
    Before the fix the neighbour kept the model's whole sd (0.095 after the flat prior), so
    expected improvement stepped to it, then to the next, one draft token at a time."""
    space = _space()
    measured = {
        "speculative_num_steps": 6,
        "speculative_eagle_topk": 8,
        "speculative_num_draft_tokens": 48,
        "mem_fraction_static": 0.9,
    }
    study = optuna.create_study(direction="maximize")
    score = objective.Score([95.0], {objective.SERVER_UP: 0.0})
    st.record(study, study.ask(), score, {"config": measured, "resolved": measured})
    posterior = Posterior.fit(space, study.trials, _SureOfNothing())  # type: ignore[arg-type]
    neighbour = {**measured, "speculative_num_draft_tokens": 49}
    far = {**measured, "speculative_num_steps": 1, "speculative_eagle_topk": 1,
           "speculative_num_draft_tokens": 2}  # fmt: skip
    mu, sd = posterior.predict([measured, neighbour, far])
    assert math.exp(mu[1]) < 97.0  # the residual is learnt
    assert sd[1] < 0.5 * sd[2]
    assert sd[1] < 0.05 < sd[2]
