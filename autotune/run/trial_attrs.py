"""What a trial records: its user attributes, built from the server's answers and the
levels' rows (`run/trial.py` calls these; `search/records.py` names every key)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from autotune.config import Config
from autotune.engines.base import ServerInfo
from autotune.search import objective, records

#: Per-level latencies as flat user attributes (`ttft_p99_ms@c16`): optuna-dashboard can
#: sort and filter trials by them, and cuts the `levels` JSON at 1024 characters.
LATENCY_ATTRS = (
    (records.TTFT_P50_MS_AT, "ttft_ms_p50"),
    (records.TTFT_P99_MS_AT, "ttft_ms_p99"),
    (records.ITL_P50_MS_AT, "itl_ms_p50"),
)


def files(files: Mapping[str, str | None]) -> dict[str, Any]:
    """The companion files as the trial's record shows them (the text, or absent)."""
    return {records.FILES: dict(files)} if files else {}


def levels(per_level: list[dict[str, Any]], longest: float) -> dict[str, Any]:
    """The levels' rows and what the study reads of them as flat attributes: throughput,
    accept length and latencies per level (optuna-dashboard sorts by them), the seconds
    the adaptive stopping rule saved against `longest` per level, the degenerate share,
    and the acceptance over the levels."""
    attrs: dict[str, Any] = {records.LEVELS: per_level}
    for r in per_level:
        c = r["concurrency"]
        attrs[records.at(records.OUTPUT_TOK_S_AT, c)] = round(float(r["output_throughput"]), 2)
        if r.get("accept_length") is not None:
            attrs[records.at(records.ACCEPT_LENGTH_AT, c)] = r["accept_length"]
        for prefix, key in LATENCY_ATTRS:
            if r.get(key) is not None:
                attrs[records.at(prefix, c)] = round(float(r[key]), 2)
    saved = sum(max(0.0, longest - r["window_s"]) for r in per_level)
    attrs[records.ADAPTIVE_SAVED_S] = round(saved, 1)
    attrs[records.DEGENERATE_SHARE] = round(max(r["degenerate_share"] for r in per_level), 3)
    accepts = [r["accept_length"] for r in per_level if r.get("accept_length")]
    if accepts:
        attrs[records.ACCEPT_LENGTH] = round(sum(accepts) / len(accepts), 3)
    shares = [r["draft_acceptance"] for r in per_level if r.get("draft_acceptance") is not None]
    if shares:
        attrs[records.DRAFT_ACCEPTANCE] = round(sum(shares) / len(shares), 4)
    return attrs


def uncertainty(cfg: Config, per_level: list[dict[str, Any]]) -> dict[str, Any]:
    """Each level's confidence interval, the levels that missed the target even after a
    second measurement, and the objective value's own relative 95 % half-width.

    The value's interval is propagated from the levels': a geometric mean of n levels
    has a relative error of sqrt(sum(rel_i^2)) / n.
    """
    attrs: dict[str, Any] = {}
    rel: dict[int, float] = {}
    for r in per_level:
        c = r["concurrency"]
        hw = r.get("ci_halfwidth")
        if isinstance(hw, (int, float)) and math.isfinite(hw):
            rel[c] = float(hw)
            attrs[records.at(records.CI_AT, c)] = round(float(hw), 4)
    if cfg.benchmark.ci_width is not None:
        missed = [r["concurrency"] for r in per_level if not r["ci_target_met"]]
        attrs[records.UNCERTAIN_LEVELS] = missed
    if cfg.objective.mode == "single" and cfg.objective.level in rel:
        attrs[records.VALUE_CI] = round(rel[cfg.objective.level], 4)
    elif cfg.objective.mode == "geomean" and len(rel) == len(per_level) and rel:
        attrs[records.VALUE_CI] = round(math.sqrt(sum(v * v for v in rel.values())) / len(rel), 4)
    return attrs


def judged(cfg: Config, measured: list[int], results: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Each constraint with its interval and chance of holding; the trial's chance of being
    feasible by them; the constraints still too close to call after a second measurement."""
    calls = objective.judged(cfg.objective, measured, results)
    if not calls:
        return {}
    return {
        records.CONSTRAINTS_JUDGED: {k: j.attrs() for k, j in calls.items()},
        records.FEASIBLE_P: round(math.prod(j.p_holds for j in calls.values()), 4),
        records.CLOSE_CONSTRAINTS: [k for k, j in calls.items() if j.close],
    }


def server(info: ServerInfo) -> dict[str, Any]:
    """What the ready server says of itself."""
    return {
        records.MAX_RUNNING_REQUESTS: info.max_running_requests,
        records.MAX_TOTAL_NUM_TOKENS: info.max_total_num_tokens,
        records.SERVER_VERSION: info.version,
        # A sped-up rehearsal says so on every trial it measured (the report repeats it).
        **({records.REHEARSAL_SPEEDUP: info.time_scale} if info.time_scale != 1.0 else {}),
    }


def failure(kind: str, reason: str) -> dict[str, Any]:
    return {records.FAILURE: kind, records.REASON: reason}
