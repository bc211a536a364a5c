"""The changing-load phase on the real simulator: a config that holds up, one whose tier
flaps, and the verdict's rules on hand-made phases."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from autotune.bench import LevelSettings, load_workload, run_level
from autotune.bench.phase import (
    PhaseResult,
    PhaseSettings,
    Segment,
    TierSwitch,
    judge,
    ramp,
    run_phase,
)
from autotune.engines.sglang import SGLangEngine
from tests.sim.conftest import SimProc, StartSim

EAGLE = ("--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "1", "--sim-seed", "2",
         "--sim-speedup", "4", "--max-running-requests", "8")  # fmt: skip
#: Down whenever a 5-step batch accepts fewer than 3.5 drafts, up from 1 step always, every
#: batch: a controller that switches several times a second, as SGLang's shipped config was
#: seen doing.
FLAPPING = {
    "1": {"candidate_steps": [1, 5], "ema_alpha": 1.0, "update_interval": 1,
          "warmup_batches": 0, "down_hysteresis": 3.0, "up_hysteresis": -3.0},
}  # fmt: skip


def _phase(sim: SimProc, fixed: dict[int, float]) -> PhaseResult:
    workload = load_workload("natural", max_tokens=96, seed=4)
    settings = PhaseSettings(levels=ramp((1, 4)), segment_s=8.0, time_scale=4.0)
    logged = len(sim.log)
    phase = asyncio.run(run_phase(sim.url, None, workload, settings, endpoint="generate"))
    switches = tuple(
        TierSwitch((at + 0.5) * 4.0, before, after)
        for at, before, after in SGLangEngine().tier_switches(sim.log[logged:])
        if at is not None
    )
    return judge(phase, fixed, switches, resolution_s=2.0)


def _fixed(sim: SimProc) -> dict[int, float]:
    workload = load_workload("natural", max_tokens=96, seed=4)
    out = {}
    for c in (1, 4):
        settings = LevelSettings(c, min_duration_s=1.0, max_duration_s=1.0, ci_width=None)
        level = asyncio.run(run_level(sim.url, None, workload, settings, endpoint="generate"))
        out[c] = level.in_server_time(4.0).output_throughput
    return out


def test_a_static_config_holds_up_and_serves_each_load_as_its_fixed_level(
    start_sim: StartSim,
) -> None:
    sim = start_sim(*EAGLE, "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4")
    fixed = _fixed(sim)
    phase = _phase(sim, fixed)
    assert phase.held_up, phase.problems
    assert [s.concurrency for s in phase.segments] == [1, 4, 1]
    assert phase.errors == 0 and phase.stalls == 0 and phase.switches == ()
    up = phase.segments[1].output_throughput
    assert 0.8 * fixed[4] < up < 1.2 * fixed[4], (up, fixed)
    # The timeline follows the load: busier bins at c=4 than at c=1.
    bins = {b["concurrency"]: b["tok_s"] for b in phase.bins[2:8]}
    assert phase.bins[15]["tok_s"] > 2 * phase.bins[5]["tok_s"], bins


def test_an_adaptive_config_whose_tier_flaps_does_not_hold_up(
    start_sim: StartSim, tmp_path: Path
) -> None:
    config = tmp_path / "flapping.json"
    config.write_text(json.dumps(FLAPPING))
    sim = start_sim(
        *EAGLE, "--speculative-num-steps", "1", "--speculative-num-draft-tokens", "2",
        "--speculative-adaptive", "--speculative-adaptive-config", str(config),
    )  # fmt: skip
    phase = _phase(sim, {})
    assert phase.switches and phase.switches_per_min_steady is not None
    assert phase.switches_per_min_steady > 60
    assert not phase.held_up
    assert any("its tier flapped" in p for p in phase.problems), phase.problems
    assert {(s.before, s.after) for s in phase.switches} <= {(1, 5), (5, 1)}


def _made(segments: list[tuple[int, float]], **kw: object) -> PhaseResult:
    return PhaseResult(
        levels=tuple(c for c, _ in segments),
        segment_s=10.0,
        bins=(),
        segments=tuple(
            Segment(c, 10.0 * i, 10.0 * (i + 1), tok_s, 10, None, None)
            for i, (c, tok_s) in enumerate(segments)
        ),
        requests=50,
        errors=int(kw.get("errors", 0)),  # type: ignore[call-overload]
        unfinished=0,
        stalls=int(kw.get("stalls", 0)),  # type: ignore[call-overload]
        longest_gap_s=float(kw.get("gap", 0.1)),  # type: ignore[arg-type]
        output_throughput=100.0,
    )


def test_a_segment_far_below_its_fixed_level_broke_at_that_switch_point() -> None:
    # vLLM issue 49548: a per-batch-size schedule served 24-157 tok/s where it switched,
    # against about 232 at the fixed level.
    judged = judge(_made([(1, 60.0), (8, 157.0), (1, 61.0)]), {1: 62.0, 8: 232.0})
    assert not judged.held_up
    assert judged.problems == ("at c=8 from 10 s it served 157 tok/s, 0.68x its fixed level's 232",)
    assert judge(_made([(1, 60.0), (8, 200.0)]), {1: 62.0, 8: 232.0}).held_up


def test_stalls_and_failures_are_problems_and_a_few_switches_are_not() -> None:
    judged = judge(_made([(1, 60.0)], stalls=2, gap=7.5, errors=1), {})
    assert judged.problems == (
        "1 requests failed during the phase",
        "2 streams stalled (longest silence 7.5 s)",
    )
    # Two switches where the load changed (the first 30 % of a segment), none at steady load.
    calm = judge(_made([(1, 60.0), (8, 150.0)]), {}, (TierSwitch(10.5, 5, 3), TierSwitch(1, 3, 5)))
    assert calm.held_up and calm.switches_per_min_steady == 0.0
