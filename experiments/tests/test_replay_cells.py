"""Replay cells: the real llama-server's space as experiments/llamacpp_sweep.py recorded it, played
back by the efficiency harness (experiments/efficiency/replay.py)."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path
from typing import Any

import pytest

from autotune.search import perf
from autotune.search import study as st
from autotune.testservers.simulated import SimulatedServer
from experiments.efficiency import replay
from experiments.efficiency.cells import Cell, all_cells, baseline_flags, landscape
from experiments.efficiency.run import run_one
from experiments.sample_efficiency import runs_on

NATURAL = Cell(replay.SPACE, replay.PROFILE, "natural", "geomean")


def _raw(workload: str) -> list[dict[str, Any]]:
    lines = replay.RECORDING.read_text().splitlines()
    return [r for r in map(json.loads, lines[1:]) if r["workload"] == workload]


@pytest.mark.parametrize("workload", ["natural", "copy"])
def test_each_recorded_workload_is_a_cell_valued_as_the_file_says(workload: str) -> None:
    cell = Cell(replay.SPACE, replay.PROFILE, workload, "geomean")
    assert cell in all_cells()
    land = landscape(cell)
    rows = _raw(workload)
    assert land.size == 46 == len(rows)
    for r in rows:
        # Each level: the log-mean of its passes; the value: their geomean over c=1 and c=4.
        logs = [
            statistics.fmean(math.log(p["levels"][c]["output_throughput"]) for p in r["passes"])
            for c in ("1", "4")
        ]
        assert land.truth(r["config"]).value == pytest.approx(math.exp(sum(logs) / 2))
    means = [statistics.fmean(p["value"] for p in r["passes"]) for r in rows]
    # The file's pass values are the study's own geomeans: the optimum is theirs.
    assert land.best.config == rows[means.index(max(means))]["config"]
    assert baseline_flags(cell)["--spec-type"] == "none"


def _record(config: dict[str, Any], deployments: list[list[tuple[float, float]]]) -> str:
    passes = [
        {
            "deployment": d,
            "pass": i + 1,
            "value": math.sqrt(a * b),
            "levels": {
                str(c): {
                    "output_throughput": v,
                    "ci_halfwidth": 0.1,
                    "requests": 10,
                    "mean_output_tokens": 128.0,
                }
                for c, v in ((1, a), (4, b))
            },
        }
        for d, runs in enumerate(deployments, start=1)
        for i, (a, b) in enumerate(runs)
    ]
    row = {"workload": "natural", "config": config, "max_running_requests": 4}
    return json.dumps({**row, "failure": None, "passes": passes})


def test_the_spread_separates_a_window_from_a_start(tmp_path: Path) -> None:
    # Two passes per deployment differing by 10 % in log at c=1 and 4 % at c=4; the
    # redeployed config's third pass 20 % above the first two's mean at both levels.
    e = math.exp
    lines = [json.dumps({"header": {"date": "test"}})]
    lines.append(_record({"spec_type": "none"}, [[(100, 100), (100 * e(-0.1), 100 * e(-0.04))]]))
    third = [(100 * e(0.2 - 0.05), 100 * e(0.2 - 0.02))]
    lines.append(
        _record(
            {"spec_type": "ngram-mod"},
            [[(100, 100), (100 * e(-0.1), 100 * e(-0.04))], third],
        )
    )
    path = tmp_path / "sweep.jsonl"
    path.write_text("\n".join(lines) + "\n")
    spread = replay.recording(path).spread("natural")
    assert spread.level == pytest.approx({1: 0.1 / math.sqrt(2), 4: 0.04 / math.sqrt(2)})
    # var(third - mean of two) = 2 dep + 1.5 level, per level, pooled over the levels.
    dep = statistics.fmean((0.2**2 - 1.5 * (d / math.sqrt(2)) ** 2) / 2 for d in (0.1, 0.04))
    assert spread.deployment == pytest.approx(math.sqrt(dep))
    assert (spread.pairs, spread.redeployed) == (2, 1)


def test_a_partial_recording_makes_no_cell(tmp_path: Path) -> None:
    lines = replay.RECORDING.read_text().splitlines()
    natural = [line for line in lines[1:] if json.loads(line)["workload"] == "natural"]
    partial, whole = tmp_path / "partial.jsonl", tmp_path / "whole.jsonl"
    partial.write_text("\n".join([lines[0], *natural[:-1]]) + "\n")
    whole.write_text("\n".join([lines[0], *natural]) + "\n")
    assert replay.workloads(partial) == []
    assert replay.workloads(whole) == ["natural"]


def test_a_replayed_deployment_draws_at_the_recorded_window_spread() -> None:
    land = landscape(NATURAL)
    server = SimulatedServer(land, random.Random(1), land.noise or 0.0)
    logs: dict[int, list[float]] = {1: [], 4: []}
    for _ in range(300):
        result = server(dict(land.best.config), lambda _c: None)
        for c in logs:
            logs[c].append(math.log(result.attrs[f"output_tok_s@c{c}"]))
    for c, xs in logs.items():
        level = land.truth(land.best.config).levels[(1, 4).index(c)]
        assert statistics.fmean(xs) == pytest.approx(math.log(level["output_throughput"]), abs=0.02)
        want = math.hypot(land.level_sd[c], land.noise or 0.0)  # type: ignore[index]
        assert statistics.stdev(xs) == pytest.approx(want, rel=0.2)


def test_a_study_on_the_replay_runs_with_the_model_off_and_says_why() -> None:
    trace = run_one(NATURAL, "default", seed=0, budget=8)
    assert len(trace.best_ratio) == 8 and 0.0 < trace.best_ratio[-1] <= 1.0
    assert not any(trace.model_on)
    cfg = landscape(NATURAL).cfg
    model, status = perf.build(cfg.space, st.performance_target(cfg), [])
    assert model is None and "draft_shape" in status["reason"]


def test_a_replay_cell_runs_only_the_candidates_that_apply() -> None:
    assert [n for n in ("default", "no-predict", "tpe", "random") if runs_on(NATURAL, n)] == [
        "default",
        "no-predict",
        "tpe",
        "random",
    ]
    assert not runs_on(NATURAL, "grid") and not runs_on(NATURAL, "default-generate")
    assert runs_on(Cell("sglang-eagle", "qwen3.5-122b-a10b-mtp", "natural", "c1"), "grid")
