"""Constraints judged with the uncertainty of what they judge (issue 28, part 4).

A degenerate share of 3 in 9 requests, or a TTFT p99 over a few seconds, is a guess: on
the real llama-server the same config came out infeasible at 0.333 and feasible at 0.1
in two trials. Each constrained statistic has an interval; a verdict whose chance lies
between 10 % and 90 % measures its level again, and what stays close is said so.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from autotune.bench.intervals import Samples, wilson
from autotune.config import ObjectiveConfig, load_config
from autotune.search import objective
from tests.helpers.e2e import autotune, status, study_dir


def test_wilsons_interval_is_the_textbook_one() -> None:
    # 0 of n: the upper end is z^2 / (n + z^2).
    z2 = 1.959964**2
    assert wilson(0, 10) == pytest.approx((0.0, z2 / (10 + z2)))
    low, high = wilson(3, 9)
    assert (round(low, 3), round(high, 3)) == (0.121, 0.646)
    assert wilson(0, 0) == (0.0, 1.0)


def _cfg(tmp_path: Path, **constraints: float | None) -> ObjectiveConfig:
    config = study_dir(tmp_path, n_trials=1)
    data = yaml.safe_load(config.read_text())
    data["objective"] = {"constraints": {"min_running_requests": None, **constraints}}
    config.write_text(yaml.safe_dump(data))
    return load_config(config).objective


def _level(share: float, n: int, workload: str = "natural", **extra: object) -> dict[str, object]:
    k = round(share * n)
    return {
        "degenerate_share": k / n,
        "workload": workload,
        "intervals": {"degenerate_share": list(wilson(k, n))},
        **extra,
    }


def test_a_share_near_its_limit_is_a_close_call_and_a_clear_one_is_not(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, max_degenerate_share=0.2)
    # The two trials of the same config on the real llama-server: both too close to call.
    for share, n in ((3 / 9, 9), (1 / 10, 10)):
        j = objective.judged(cfg, [1], {1: _level(share, n)})[objective.DEGENERATE]
        assert j.close, j
    clean = objective.judged(cfg, [1], {1: _level(0.0, 60)})[objective.DEGENERATE]
    looping = objective.judged(cfg, [1], {1: _level(0.6, 40)})[objective.DEGENERATE]
    assert clean.p_holds > 0.95 and not clean.close
    assert looping.p_holds < 0.05 and not looping.close
    # Every level must hold: the chances multiply, the least likely level decides.
    both = objective.judged(cfg, [1, 4], {1: _level(0.1, 30), 4: _level(0.15, 30)})
    one = objective.judged(cfg, [4], {4: _level(0.15, 30)})
    assert both[objective.DEGENERATE].level == 4
    assert both[objective.DEGENERATE].p_holds < one[objective.DEGENERATE].p_holds
    # Greedy text loops by nature: not judged.
    assert objective.judged(cfg, [1], {1: _level(0.5, 10, "greedy")}) == {}


def test_a_latency_limit_is_judged_on_the_interval_of_its_percentile(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, max_ttft_p99_ms=500.0)
    ttft = tuple(0.1 + 0.4 * i / 19 for i in range(20))  # 100..500 ms
    samples = Samples(ttft_s=ttft, degenerate=(False,) * 20)
    low, high = samples.intervals()["ttft_ms_p99"]
    assert low < 500 <= high + 1e-9
    p99 = samples.latencies_ms()["ttft_ms_p99"]
    row = {"ttft_ms_p99": p99, "workload": "natural", "intervals": samples.intervals()}
    j = objective.judged(cfg, [1], {1: row})[objective.TTFT_P99]
    assert j.statistic == "ttft_ms_p99" and j.p_holds > 0.5
    # A level that kept no requests to say is judged on its value alone.
    bare = objective.judged(cfg, [1], {1: {"ttft_ms_p99": 600.0, "workload": "natural"}})
    assert bare[objective.TTFT_P99].p_holds == 0.0


def test_more_requests_narrow_the_interval() -> None:
    few = Samples(degenerate=(True,) + (False,) * 9).intervals()["degenerate_share"]
    many = Samples(degenerate=((True,) + (False,) * 9) * 10).intervals()["degenerate_share"]
    assert many[1] - many[0] < 0.5 * (few[1] - few[0])


@pytest.mark.slow  # an end-to-end run: not in make test-fast
def test_a_close_call_is_measured_again_and_said(tmp_path: Path) -> None:
    # A small model's habit: a fifth of sampled replies loop, right at the default limit.
    config = study_dir(
        tmp_path, n_trials=3, sim_flags="--sim-load-time 0.2 --sim-loop-share 0.2 --sim-seed 5"
    )
    data = yaml.safe_load(config.read_text())
    data["objective"] = {"constraints": {"min_running_requests": 4, "max_degenerate_share": 0.2}}
    data["benchmark"].update(max_tokens=48, min_duration=1.5, max_duration=2.0, ci_width=None)
    config.write_text(yaml.safe_dump(data))
    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "measuring the level again" in proc.stderr

    study = optuna.load_study(study_name="e2e", storage=data["study"]["storage"])
    measured = [t for t in study.trials if t.user_attrs.get("levels")]
    assert measured
    again = 0
    for t in measured:
        judged = t.user_attrs["constraints_judged"][objective.DEGENERATE]
        assert judged["limit"] == 0.2 and len(judged["interval"]) == 2
        assert 0.0 <= t.user_attrs["feasible_p"] <= 1.0
        for level in t.user_attrs["levels"]:
            if any("too close to call" in n for n in level["notes"]):
                again += 1
                assert len(level["attempt_throughputs"]) == 2
    assert again >= 1
    rows = status(config)["trials"]
    text = autotune("status", "--config", str(config), cwd=tmp_path).stdout
    close = [r for r in rows if r["close_constraints"]]
    for r in close:
        # The only judged constraint: the trial is feasible with exactly its chance.
        assert r["close_constraints"] == [objective.DEGENERATE]
        assert 0.05 < r["feasible_p"] < 0.95
    assert ("CLOSE CALL degenerate_output" in text) == bool(close)
