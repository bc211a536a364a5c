"""A deployment's changing-load phase: run it, read the server's tier switches, judge it.

Run after the fixed levels of a finalist's first re-measurement and of each adaptive
probe (`export-adaptive --measure`), in the same deployment, so that the phase is judged
against the levels that deployment itself served (`autotune/bench/phase.py`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from autotune import log as alog
from autotune.bench.phase import PhaseResult, PhaseSettings, TierSwitch, judge, ramp, run_phase
from autotune.engines.base import ServerInfo
from autotune.log import get
from autotune.run.measuring import Measuring

if TYPE_CHECKING:
    from autotune.bench.deck import PromptDeck

log = get("autotune.run.load_phase")


def measure_phase(
    p: Measuring, info: ServerInfo, deck: PromptDeck, fixed: dict[int, float]
) -> PhaseResult:
    b = p.cfg.benchmark
    settings = PhaseSettings(
        levels=ramp(b.concurrency),
        segment_s=b.load_phase_segment,
        time_scale=info.time_scale,
    )
    log.info(
        "changing-load phase",
        levels=list(settings.levels),
        segment_s=settings.segment_s,
        about_s=round(len(settings.levels) * settings.segment_s / info.time_scale),
    )
    log_from = len(p.deployer.logs())
    phase = asyncio.run(
        run_phase(
            p.url,
            p.cfg.target.model,
            p.workload,
            settings,
            api_key=p.api_key,
            endpoint=b.endpoint,
            deck=deck,
            on_progress=_progress,
        )
    )
    # Times from the phase's first logged line (its first request) on the server's own clock;
    # stamps are whole seconds of wall time, so each is taken mid-second and counted as steady
    # only that far from a load change. The phase runs in the server's time.
    k = info.time_scale
    switches = tuple(
        TierSwitch((at + 0.5) * k, before, after)
        for at, before, after in p.engine.tier_switches(p.deployer.logs()[log_from:])
        if at is not None
    )
    judged = judge(phase, fixed, switches, resolution_s=0.5 * k)
    log.info(
        "changing-load phase done",
        held_up=judged.held_up,
        tok_s=round(judged.output_throughput, 1),
        switches=len(judged.switches),
        stalls=judged.stalls,
        **({"problems": "; ".join(judged.problems)} if judged.problems else {}),
    )
    return judged


def _progress(s: dict[str, Any]) -> None:
    alog.progress(
        level=f"changing load {s['segment']}/{s['of']} (c={s['concurrency']})", tok_s=None
    )
