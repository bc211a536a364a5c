"""Foreign cells: landscapes others measured on real GPUs, replayed by the efficiency harness
(experiments/efficiency/foreign.py, one data file per source under
experiments/efficiency/foreign/)."""

from __future__ import annotations

import pytest

from experiments.efficiency import foreign
from experiments.efficiency.cells import Cell, all_cells, baseline_flags, landscape
from experiments.efficiency.run import run_one


def _cell(name: str, objective: str) -> Cell:
    return Cell(foreign.SPACE, name, "natural", objective)


def _best_steps(name: str, objective: str) -> int:
    return int(landscape(_cell(name, objective)).best.config["speculative_num_steps"])


def test_every_source_file_loads_into_cells_with_a_cited_source() -> None:
    cells = [c for c in all_cells() if c.space == foreign.SPACE]
    assert len(cells) >= 5
    assert sum(isinstance(foreign.by_name(c.profile), foreign.Source) for c in cells) >= 3
    for cell in cells:
        source = foreign.by_name(cell.profile)
        assert source.url.startswith("https://github.com/"), source.path
        if isinstance(source, foreign.Cost):
            continue  # the next test
        land = landscape(cell)
        assert land.size == len(source.rows)  # the space is exactly the configs measured
        assert land.noise == source.noise
        steps = baseline_flags(cell)["--speculative-num-steps"]
        assert steps == str(source.baseline[0])


@pytest.mark.parametrize(
    "name,objective,steps",
    [
        # The authors' own words about their tables: "E1 has optimal K=3 and E3 has optimal
        # K=4" (vLLM issue 20780); "Qwen3-235B-A22B performs best with step=4 at BS=1 but
        # step=2 at BS=64" (SGLang PR 22246; at BS=1 steps 4 and 5 tie at 199 tok/s).
        ("llama8b-eagle1-20780", "c1", 3),
        ("llama8b-eagle3-20780", "c1", 4),
        ("qwen235b-22246", "c64", 2),
    ],
)
def test_the_replayed_optimum_is_the_one_the_source_names(
    name: str, objective: str, steps: int
) -> None:
    assert _best_steps(name, objective) == steps


def test_a_tpot_row_is_one_requests_throughput() -> None:
    land = landscape(_cell("llama8b-eagle3-20780", "c1"))
    four = land.truth(
        {"speculative_num_steps": 4, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 5}
    )
    assert four.value == pytest.approx(1000 / 4.05)  # TPOT 4.05 ms at batch 1
    assert four.levels[0]["accept_length"] == 3.08


def test_filled_values_are_counted_and_shown() -> None:
    glm = foreign.by_name("glm47-22246")
    assert glm.levels([1, 16, 64]) == (1, 15)
    assert glm.levels([1]) == (0, 5)


def test_the_counting_rule_keeps_the_posted_mean() -> None:
    for mean, depth in ((2.36, 2), (3.54, 7), (1.2, 4)):
        dist = foreign.chain_dist(mean, depth)
        assert sum(dist) == pytest.approx(1.0)
        assert sum((i + 1) * p for i, p in enumerate(dist)) == pytest.approx(mean)


def test_without_a_posted_accept_length_the_model_stays_off() -> None:
    # SGLang PR 22246 posts throughput only: nothing for the model to fit.
    trace = run_one(_cell("qwen235b-22246", "geomean"), "default", seed=0, budget=4)
    assert not any(trace.model_on)
    # vLLM issue 20780 posts the accept length: the model fits and steers.
    trace = run_one(_cell("llama8b-eagle3-20780", "c1"), "default", seed=0, budget=4)
    assert any(trace.model_on)


def test_a_cost_cell_lays_the_measured_cost_on_its_simulator_cell() -> None:
    base = landscape(Cell("sglang-eagle", "llama3.1-8b-eagle3-h100", "natural", "geomean"))
    tree = landscape(_cell("tree-mask-cost", "geomean"))
    cliff = landscape(_cell("graph-cliff-cost", "geomean"))
    chain = {"speculative_num_steps": 3, "speculative_eagle_topk": 1}
    chain["speculative_num_draft_tokens"] = 4
    wide = {"speculative_num_steps": 5, "speculative_eagle_topk": 4}
    wide["speculative_num_draft_tokens"] = 8
    # A tree runs 1.113 times as long (vLLM PR 20401's masked kernel); a chain as before.
    assert tree.truth(wide).value == pytest.approx(base.truth(wide).value / 1.113)
    assert tree.truth(chain).value == pytest.approx(base.truth(chain).value)
    # Above 32 running requests every iteration is eager, 4.2 times as long (SGLang issue
    # 33483): only the level at concurrency 64 (48 running) pays, a third of the geomean.
    levels = cliff.truth(chain).levels
    assert [lv["batch"] for lv in levels] == [1, 16, 48]
    slowed = [b["output_throughput"] / c["output_throughput"] for b, c in
              zip(base.truth(chain).levels, levels, strict=True)]  # fmt: skip
    assert slowed == pytest.approx([1.0, 1.0, 4.2])
    assert cliff.truth(chain).value == pytest.approx(base.truth(chain).value / 4.2 ** (1 / 3))


@pytest.mark.parametrize("name", ["llama8b-eagle3-20780", "llama8b-eagle1-20780"])
def test_the_models_chain_curve_predicts_published_accept_lengths(name: str) -> None:
    """The model's acceptance curve is a family we chose beside our simulator; here it is
    graded on accept lengths someone else measured (vLLM issue 20780, K = 2 ... 7): each
    depth predicted from the other five within 2 % (measured: at most 1.5 %)."""
    from autotune.search.perf.acceptance import Acceptance, Seen

    source = foreign.by_name(name)
    assert isinstance(source, foreign.Source)
    seen = [Seen(r.shape[0], 1, r.shape[2], r.accept_length or 0.0) for r in source.rows]
    for held, s in enumerate(seen):
        model = Acceptance.fit([x for i, x in enumerate(seen) if i != held])
        assert model is not None
        predicted = model.length(s.steps, 1, s.draft)
        assert predicted == pytest.approx(s.accept_length, rel=0.02), (s.steps, predicted)


@pytest.mark.parametrize("name", ["llama8b-eagle3-20780", "llama8b-eagle1-20780"])
def test_the_models_step_cost_predicts_published_iteration_times(name: str) -> None:
    """The step cost is linear in what an iteration does, as is our simulator's; graded on
    iteration times someone else measured (vLLM issue 20780 at batch 1: accept length x
    TPOT), each depth predicted from the other five within 5 % (measured: at most 4.1 %)."""
    from autotune.search.perf.step_cost import StepCost, Timed

    source = foreign.by_name(name)
    assert isinstance(source, foreign.Source)
    timed = [
        Timed(r.shape[0], 1, r.shape[2], 1.0, (r.accept_length or 0.0) / r.tok_s[1])
        for r in source.rows
    ]
    for held, t in enumerate(timed):
        cost = StepCost.fit([x for i, x in enumerate(timed) if i != held])
        assert cost is not None
        predicted, _ = cost.predict(t.steps, 1, t.draft, 1.0)
        assert predicted == pytest.approx(t.seconds, rel=0.05), (t.steps, predicted, t.seconds)
