"""The performance model's parts (autotune/search/perf/) and when it turns itself off.

Unit tests of single functions on numbers built here; the evidence that the model
holds on real engines is tests/llamacpp/test_perf_model.py (a real llama-server) and
experiments/results/sample_efficiency.md (the simulator's landscapes).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import yaml

from autotune.config import load_config
from autotune.errors import ConfigError
from autotune.search import capacity, perf
from autotune.search import study as st
from autotune.search.perf.acceptance import (
    Acceptance,
    Seen,
    length_sampling_sd,
    tree_accept_dist,
)
from autotune.search.perf.model import MISFIT, PerfModel, Target
from autotune.search.perf.step_cost import StepCost, Timed
from autotune.space import load_space, space_from_dict
from tests.helpers.e2e import autotune, study_dir

REPO = Path(__file__).resolve().parents[2]
MTP = load_space(REPO / "search_spaces" / "sglang-mtp.yaml")
EAGLE = load_space(REPO / "search_spaces" / "sglang-eagle.yaml")


def chain_alphas(depth: int, a: float = 0.8, r: float = 0.9, p: float = 1.3) -> list[float]:
    return [a * r ** (j**p) for j in range(depth)]


def reach_of(alphas: list[float]) -> tuple[float, ...]:
    out, p = [], 1.0
    for x in alphas:
        p *= x
        out.append(p)
    return tuple(out)


def length_of(alphas: list[float]) -> float:
    return 1.0 + sum(reach_of(alphas))


# -- acceptance --------------------------------------------------------------------------
def test_a_deep_chains_counts_give_every_shallower_chain_exactly() -> None:
    alphas = chain_alphas(6)
    model = Acceptance.fit([Seen(6, 1, 7, length_of(alphas), reach_of(alphas))])
    assert model is not None
    for depth in range(1, 7):
        assert model.length(depth, 1, depth + 1) == pytest.approx(
            length_of(alphas[:depth]), rel=0.005
        )


def test_sglangs_histogram_is_read_as_reach_per_position() -> None:
    # 10 verify steps accepted 0 drafts, 30 one, 60 two: P(>= 1) = 0.9, P(>= 2) = 0.6.
    assert perf.reach_from_histogram([10, 30, 60]) == pytest.approx((0.9, 0.6))
    assert perf.reach_from_histogram([0, 0]) is None


def test_the_sampling_error_of_an_accept_length_matches_drawn_verify_steps() -> None:
    # Nested hits: a verify step accepting k drafts reaches positions 1..k.
    reach = (0.9, 0.8, 0.7, 0.55, 0.4, 0.25)
    rng = np.random.default_rng(0)
    u = rng.random((20000, 40))
    accepted = (u[..., None] < np.array(reach)).sum(axis=-1)  # per step: drafts accepted
    means = 1 + accepted.mean(axis=1)  # 20000 windows of 40 verify steps
    assert means.std() == pytest.approx(length_sampling_sd(reach, 40), rel=0.03)


def test_a_chain_counted_on_few_verify_steps_says_its_accept_length_is_that_uncertain() -> None:
    alphas = chain_alphas(6)
    reach = reach_of(alphas)
    few = Acceptance.fit([Seen(6, 1, 7, length_of(alphas), reach, drafts=32)])
    many = Acceptance.fit([Seen(6, 1, 7, length_of(alphas), reach, drafts=32000)])
    unknown = Acceptance.fit([Seen(6, 1, 7, length_of(alphas), reach)])
    assert few is not None and many is not None and unknown is not None
    expected = length_sampling_sd(reach[:4], 32) / length_of(alphas[:4])
    assert few.relative_sd(4, 1, 5) == pytest.approx(math.hypot(0.01, expected), rel=1e-6)
    assert many.relative_sd(4, 1, 5) == pytest.approx(0.01, abs=0.002)
    assert unknown.relative_sd(4, 1, 5) == pytest.approx(0.01)
    # Pooled rows weigh by the steps they counted.
    pooled = Acceptance.fit(
        [Seen(2, 1, 3, 1.7, (0.5, 0.2), drafts=10), Seen(2, 1, 3, 2.3, (0.8, 0.5), drafts=30)]
    )
    assert pooled is not None
    assert pooled.measured_reach == pytest.approx((0.725, 0.425))
    assert pooled.measured_drafts == (40.0, 40.0)


def test_positions_past_the_deepest_counted_are_extrapolated_by_the_curve() -> None:
    alphas = chain_alphas(8, a=0.72, r=0.86, p=1.4)  # the simulator's natural Qwen drafter
    model = Acceptance.fit([Seen(4, 1, 5, length_of(alphas[:4]), reach_of(alphas[:4]))])
    assert model is not None
    assert model.length(8, 1, 9) == pytest.approx(length_of(alphas), rel=0.05)
    # And it says the extrapolation is less certain than what was counted.
    assert model.relative_sd(8, 1, 9) > model.relative_sd(3, 1, 4)


def test_mean_accept_lengths_alone_pin_the_chains_they_measured() -> None:
    """llama.cpp's `timings` give the mean only: two depths pin the curve there."""
    alphas = chain_alphas(6)
    seen = [Seen(d, 1, d + 1, length_of(alphas[:d])) for d in (2, 5)]
    model = Acceptance.fit(seen)
    assert model is not None
    for d in (2, 5):
        assert model.length(d, 1, d + 1) == pytest.approx(length_of(alphas[:d]), rel=0.02)
    assert model.length(3, 1, 4) == pytest.approx(length_of(alphas[:3]), rel=0.04)


def test_a_trees_widening_is_fitted_from_the_trees_deployed() -> None:
    alphas = chain_alphas(5)
    chain = Seen(5, 1, 6, length_of(alphas), reach_of(alphas))

    def tree(steps: int, topk: int, draft: int) -> Seen:
        dist = tree_accept_dist(alphas[:steps], topk, draft, 0.45)
        return Seen(steps, topk, draft, sum((i + 1) * p for i, p in enumerate(dist)))

    before = Acceptance.fit([chain])
    after = Acceptance.fit([chain, tree(3, 4, 8), tree(4, 2, 8)])
    assert before is not None and after is not None
    truth = tree(5, 4, 12).accept_length
    assert after.length(5, 4, 12) == pytest.approx(truth, rel=0.01)
    assert after.relative_sd(5, 4, 12) < before.relative_sd(5, 4, 12)


# -- step cost ---------------------------------------------------------------------------
def test_the_step_cost_is_recovered_from_levels_of_a_few_deployments() -> None:
    def seconds(steps: int, topk: int, draft: int, batch: float) -> float:
        return 0.011 + 0.0004 * steps + batch * (0.0006 + 0.00019 * draft + 0.00001 * steps * topk)

    timed = [
        Timed(s, k, d, b, seconds(s, k, d, b))
        for s, k, d in ((3, 1, 4), (1, 1, 2), (5, 1, 6))
        for b in (1, 16, 48)
    ]
    cost = StepCost.fit(timed)
    assert cost is not None
    for s, k, d, b in ((2, 1, 3, 16), (4, 1, 5, 1), (8, 1, 9, 48)):
        t, sd = cost.predict(s, k, d, b)
        assert t == pytest.approx(seconds(s, k, d, b), rel=0.03)
        assert sd < 0.1 * t


# -- capacity ----------------------------------------------------------------------------
def test_one_deployment_bounds_capacity_and_two_pin_it() -> None:
    # Calibration: 26 requests at 2 tokens reserved per request, 21 at 3.
    one = capacity.rule_bounds([(3, 21)], 5)
    two = capacity.rule_bounds([(2, 26), (3, 21)], 5)
    assert one is not None and two is not None
    assert one[0] < two[0] <= 15 <= two[1] < one[1]
    # Settled either way where a deployed config says so (the rule is monotone).
    assert capacity.chance_reaches([(2, 26), (3, 21)], 1, 16) == 1.0
    assert capacity.chance_reaches([(3, 15)], 4, 16) == 0.0
    assert capacity.chance_reaches([(2, 26), (3, 21)], 8, 16) == 0.0
    assert 0.0 < capacity.chance_reaches([(2, 26), (3, 21)], 5, 16) < 1.0  # type: ignore[operator]


def test_points_no_rule_passes_give_no_bounds() -> None:
    # More tokens reserved and more requests: no line with a, b >= 0 passes both.
    assert capacity.rule_bounds([(2, 20), (4, 30)], 3) is None
    assert capacity.rule_bounds([], 3) is None


def test_the_rule_skips_a_config_after_two_deployments() -> None:
    p = capacity.predict_from([(2, 26), (3, 21)], 6, 16)
    assert p is not None and p.high < 16
    assert "memory rule" in p.basis
    assert capacity.predict_from([(2, 26), (3, 21)], 4, 16) is None  # 16.7-19.7: may reach


# -- the model on a study's trials -----------------------------------------------------
def trial(
    config: dict[str, Any], levels: list[dict[str, Any]], running: int, value: float
) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        value=value,
        user_attrs={"config": config, "levels": levels, "max_running_requests": running},
    )


def mtp_trials(
    steps: list[int], lie: float = 1.0, ci: float | None = None, alphas_lie: float = 1.0
) -> list[optuna.trial.FrozenTrial]:
    """Deployments of the MTP chain measured as the model's physics says, the last one's
    throughput off by `lie`; its draft accepting each position `alphas_lie` times as often
    (the throughput following); every level measured to `ci` (relative 95 % half-width)."""
    out = []
    for i, s in enumerate(steps):
        last = i == len(steps) - 1
        alphas = [min(0.99, a * (alphas_lie if last else 1.0)) for a in chain_alphas(8)]
        running = int(1.0 / (0.02 + 0.004 * (s + 1)))
        rows, logs = [], []
        for c in (1, 16, 64):
            batch = min(c, running)
            t = 0.011 + 0.0004 * s + batch * (0.0006 + 0.00019 * (s + 1))
            tput = batch * length_of(alphas[:s]) / t * (lie if last else 1.0)
            hist = [round(1000 * x) for x in _dist(alphas[:s])]
            rows.append(
                {
                    "concurrency": c,
                    "output_throughput": tput,
                    "accept_length": length_of(alphas[:s]),
                    "accept_histogram": hist,
                    **({"ci_halfwidth": ci} if ci is not None else {}),
                }
            )
            logs.append(math.log(tput))
        config = {
            "speculative_num_steps": s,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": s + 1,
        }
        out.append(trial(config, rows, running, math.exp(sum(logs) / 3)))
    return out


def _dist(alphas: list[float]) -> list[float]:
    reach = (1.0, *reach_of(alphas), 0.0)
    return [reach[i] - reach[i + 1] for i in range(len(alphas) + 1)]


TARGET = Target((1, 16, 64), "geomean", None, 16)


def test_the_model_predicts_a_chain_it_never_deployed() -> None:
    truth = mtp_trials([3, 1, 6, 2])
    model, status = perf.build(MTP, TARGET, truth[:3])
    assert model is not None and status["on"] is True
    predicted = model.predict(truth[3].user_attrs["config"])
    assert predicted is not None
    assert math.exp(predicted.log_value) == pytest.approx(truth[3].value, rel=0.03)


def test_a_landscape_the_model_misfits_turns_it_off_and_says_why() -> None:
    # The deployments keep contradicting the physics: the fourth measured 40 % above it.
    trials = mtp_trials([3, 1, 6, 2], lie=1.4)
    model, status = perf.build(MTP, TARGET, trials)
    assert model is None and status["on"] is False
    assert status["loo_rms"] > MISFIT
    assert "missed the measured values" in status["reason"]


def test_a_residual_within_its_measured_interval_is_not_a_miss() -> None:
    """The same 12 % excess read twice: measured to 2 % per level it is the model's miss;
    measured to 40 % per level (the real llama-server's benchmark on this CPU: 35-50 %) it is
    the benchmark's noise."""
    tight = perf.build(MTP, TARGET, mtp_trials([3, 1, 6, 2], lie=1.12, ci=0.02))[1]
    noisy = perf.build(MTP, TARGET, mtp_trials([3, 1, 6, 2], lie=1.12, ci=0.4))[1]
    assert tight["on"] is False and tight["loo_rms"] > MISFIT
    assert noisy["on"] is True and noisy["loo_rms"] < MISFIT


def test_a_wrong_acceptance_curve_does_not_hide_behind_wide_throughput_intervals() -> None:
    """The real llama-server's misfit landscape: a chain accepting far more than the deep
    chain counted for its positions. Its throughput measured to 80 % per level, the value's
    residual is within one sd and explained away; the accept length, counted on 1000
    verify steps per level, is known to a few percent, and it is what the model got
    wrong."""
    trials = mtp_trials([3, 1, 6, 2], ci=0.8, alphas_lie=1.35)
    status = perf.build(MTP, TARGET, trials)[1]
    assert status["on"] is False and status["loo_rms"] > MISFIT, status
    # The value alone would pass.
    deployed = perf.model.deployments(MTP, TARGET, trials)
    model = PerfModel.fit(MTP, TARGET, perf.model.held_out(deployed, 3))
    assert isinstance(model, PerfModel)
    predicted = model.predict(deployed[3].config)
    assert predicted is not None and deployed[3].log_value is not None
    residual = predicted.log_value - deployed[3].log_value
    assert perf.model.unexplained(residual, perf.model.value_sd(deployed[3], TARGET)) == 0.0


def test_the_model_is_off_where_its_physics_does_not_apply() -> None:
    ngram = load_space(REPO / "search_spaces" / "sglang-ngram.yaml")
    assert perf.build(ngram, TARGET, [])[1]["reason"].startswith("the space has no draft_shape")
    pareto = Target((1, 16), "pareto")
    assert "Pareto" in perf.build(MTP, pareto, [])[1]["reason"]
    assert perf.build(MTP, None, [])[1]["on"] is False
    # Deployments whose server counted no acceptance: nothing to fit.
    level = {"concurrency": 1, "output_throughput": 90.0}
    silent = [trial({"speculative_num_steps": 3}, [level], 20, 90.0)]
    assert "accept length" in perf.build(MTP, TARGET, silent)[1]["reason"]


def test_a_bad_draft_shape_is_one_line_naming_the_key() -> None:
    data = {"params": {"n": {"flag": "--n", "low": 1, "high": 4}},
            "draft_shape": {"steps": "n", "topk": "k", "draft": "n + 1"}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"draft_shape\.topk"):
        space_from_dict(data, "bad.yaml")
    data["draft_shape"] = {"steps": "n"}
    with pytest.raises(ConfigError, match="draft_shape"):
        space_from_dict(data, "bad.yaml")


def test_the_spaces_say_what_draft_each_config_builds() -> None:
    assert EAGLE.shape({"speculative_num_steps": 3, "speculative_eagle_topk": 4,
                        "speculative_num_draft_tokens": 8}) == (3, 4, 8)  # fmt: skip
    # Rules applied: topk 1 makes draft tokens steps + 1.
    assert EAGLE.shape({"speculative_num_steps": 3, "speculative_eagle_topk": 1,
                        "speculative_num_draft_tokens": 8}) == (3, 1, 4)  # fmt: skip
    full = {
        "speculative_num_steps": 5,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 6,
    }
    assert MTP.shape(full) == (5, 1, 6)


# -- a study on the simulated server -----------------------------------------------------
@pytest.mark.slow  # an end-to-end run: not in make test-fast
def test_a_study_predicts_each_config_before_deploying_it(tmp_path: Path) -> None:
    """`autotune start` on the simulator, benchmarking SGLang's native /generate: the client
    sums the per-request histograms of accepted drafts, the model reads them, every config
    the sampler proposes carries its prediction, and `status` and the report say so."""
    config = study_dir(
        tmp_path, space="sglang-eagle.yaml", n_trials=5, concurrency=[1, 8],
        objective={"constraints": {"min_running_requests": 12}},
    )  # fmt: skip
    data = yaml.safe_load(config.read_text())
    data["benchmark"].update(endpoint="generate", min_duration=0.5, max_duration=0.5)
    data["benchmark"]["ci_width"] = None
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = st.open_study(load_config(config), create=False)
    deployed = [t for t in study.get_trials() if t.user_attrs.get("levels")]
    for t in deployed:
        for level in t.user_attrs["levels"]:
            hist = level["accept_histogram"]
            tokens = sum((i + 1) * n for i, n in enumerate(hist))
            # (a request's last step counts what was accepted, not what fit in max_tokens)
            assert tokens / sum(hist) == pytest.approx(level["accept_length"], rel=0.1)
    predicted = [t for t in deployed if t.user_attrs.get(perf.PREDICTED)]
    # The first proposal after the baseline is predicted (the model is on from there); later
    # ones are while it stays on (noisy half-second windows may turn it off).
    assert deployed[1] in predicted and deployed[0] not in predicted
    # Half-second windows are noisy: the model may have turned itself off by the end.
    status = study.user_attrs[perf.STATUS]
    shown = autotune("status", "--config", str(config), cwd=tmp_path)
    assert f"performance model: {perf.describe(status)}" in shown.stdout
    made = autotune("report", "--config", str(config), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-3000:]
    html = Path(made.stdout.strip()).read_text()
    assert "Predicted before deploying" in html and "The performance model was" in html
    for t in predicted:
        assert f"<td>{t.number}</td>" in html


def test_the_models_tree_is_the_one_sglang_builds() -> None:
    """Issue 50: three draft tokens over two steps of topk 2 are the first guess, its first
    guess and the root's second guess (SGLang's top-scored nodes): the second guess has no
    child, where the model's old per-depth widening gave it one (0.845 x 0.62)."""
    dist = tree_accept_dist((0.72, 0.62), 2, 4, 0.55)
    second = 0.28 * (1 - 0.55)
    assert 1.0 - dist[0] == pytest.approx(0.72 + second)
    assert dist[2] == pytest.approx(0.72 * 0.62)
