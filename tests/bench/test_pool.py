from __future__ import annotations

import dataclasses
from dataclasses import MISSING

import pytest

from autotune.bench.pool import pool_levels
from autotune.bench.result import LevelResult
from autotune.engines import Counters


def level(rate: float, window: float, hw_rel: float, **extra: object) -> LevelResult:
    fields = {f.name: None for f in dataclasses.fields(LevelResult) if f.default is MISSING}
    fields.update(
        concurrency=1,
        output_throughput=rate,
        window_s=window,
        output_tokens=round(rate * window),
        input_tokens=100,
        requests=5,
        errors=0,
        window_requests=5,
        chunks=50,
        ci_halfwidth=hw_rel,
        ci_halfwidth_tok_s=hw_rel * rate,
        ci_target_met=False,
        accept_length=None,
    )
    return LevelResult(**{**fields, **extra})  # type: ignore[arg-type]


def test_two_agreeing_runs_pool_into_a_narrower_interval() -> None:
    out = pool_levels(level(100, 10, 0.08), level(102, 10, 0.08), ci_width=0.07)
    assert out.output_throughput == pytest.approx(101)
    assert out.ci_halfwidth == pytest.approx(0.08 * 101 / (2**0.5) / 101, rel=0.02)
    assert out.ci_target_met is True
    assert out.attempt_throughputs == (100, 102)
    assert out.window_s == 20 and out.requests == 10
    assert any("measured twice" in n for n in out.notes)


def test_two_runs_that_disagree_are_never_reported_as_certain() -> None:
    out = pool_levels(level(100, 10, 0.03), level(140, 10, 0.03), ci_width=0.05)
    # Half the gap (20 tok/s) dominates the runs' own intervals.
    assert out.ci_halfwidth_tok_s == pytest.approx(20)
    assert out.ci_target_met is False


def test_server_counters_are_pooled_too() -> None:
    a = level(100, 10, 0.1, draft_tokens=50, draft_accepted=25,
              server=Counters(1000, draft_tokens=50, accepted_tokens=25, drafts=10))  # fmt: skip
    b = level(100, 10, 0.1, draft_tokens=150, draft_accepted=125,
              server=Counters(1000, draft_tokens=150, accepted_tokens=125, drafts=30))  # fmt: skip
    out = pool_levels(a, b, ci_width=0.05)
    assert out.draft_acceptance == pytest.approx(150 / 200)
    assert out.server is not None
    assert out.server.acceptance == pytest.approx(150 / 200)
    assert out.server.accept_length == pytest.approx(1 + 150 / 40)
