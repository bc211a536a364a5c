"""How per-level measurements become the study's value(s) and constraints.

Constraints follow Optuna's convention: a trial is feasible when every value
is <= 0. Every trial sets every constraint key, so that a cached or failed
trial is never mistaken for a feasible one (a trial without constraint values
counts as feasible in Optuna).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.config import ObjectiveConfig

#: Every constraint key, in the order they are recorded.
SERVER_UP = "server_up"
MIN_RUNNING_REQUESTS = "min_running_requests"
TTFT_P99 = "ttft_p99_ms"
ITL_P50 = "itl_p50_ms"
DEGENERATE = "degenerate_output"
CONSTRAINT_KEYS = (SERVER_UP, MIN_RUNNING_REQUESTS, TTFT_P99, ITL_P50, DEGENERATE)


@dataclass(frozen=True)
class Score:
    values: list[float]
    constraints: dict[str, float]

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.constraints.values())


def metric_names(cfg: ObjectiveConfig, levels: Sequence[int]) -> list[str]:
    if cfg.mode == "geomean":
        return ["geomean_output_tok_s"]
    if cfg.mode == "single":
        return [f"output_tok_s@c{cfg.level}"]
    if cfg.mode == "goodput":
        return [f"goodput_req_s@{cfg.rate:g}/s"]
    if cfg.mode == "max_rate":
        return ["max_rate_req_s"]
    return [f"output_tok_s@c{c}" for c in levels]


def n_objectives(cfg: ObjectiveConfig, levels: Sequence[int]) -> int:
    return len(metric_names(cfg, levels))


def capacity_violation(cfg: ObjectiveConfig, max_running_requests: int | None) -> float:
    """> 0 when the server cannot run as many requests as the user needs."""
    floor = cfg.constraints.min_running_requests
    if floor is None:
        return 0.0
    if max_running_requests is None:
        return float(floor)
    return float(floor - max_running_requests)


def score(
    cfg: ObjectiveConfig,
    levels: Sequence[int],
    results: Mapping[int, Mapping[str, Any]],
    max_running_requests: int | None,
    rates: Sequence[Mapping[str, Any]] = (),
) -> Score:
    """Score a server that came up and was benchmarked at every level (and `rates`, the
    open-loop levels measured, when the objective is one of theirs)."""
    throughput = {c: float(results[c]["output_throughput"]) for c in levels}
    if cfg.mode == "geomean":
        values = [_geomean(list(throughput.values()))]
    elif cfg.mode == "single":
        assert cfg.level is not None
        values = [throughput[cfg.level]]
    elif cfg.mode == "goodput":
        at = [float(r["goodput"]) for r in rates if math.isclose(float(r["rate"]), cfg.rate or 0)]
        values = [at[0] if at else 0.0]
    elif cfg.mode == "max_rate":
        values = [highest_meeting(rates)]
    else:
        values = [throughput[c] for c in levels]

    c = cfg.constraints
    ttft = 0.0
    if c.max_ttft_p99_ms is not None:
        worst = max(float(results[lv]["ttft_ms_p99"]) for lv in levels)
        ttft = worst - c.max_ttft_p99_ms
    itl = 0.0
    if c.max_itl_p50_ms is not None:
        worst = max(float(results[lv]["itl_ms_p50"]) for lv in levels)
        itl = worst - c.max_itl_p50_ms
    # Above this share of degenerate replies (heavy n-gram repetition) a config is producing
    # garbage fast, not serving. Greedy decoding repeats itself by nature: exempt.
    degenerate = 0.0
    greedy = all(results[lv].get("workload") == "greedy" for lv in levels)
    if c.max_degenerate_share is not None and not greedy:
        worst_share = max(float(results[lv].get("degenerate_share") or 0.0) for lv in levels)
        degenerate = worst_share - c.max_degenerate_share
    constraints = {
        SERVER_UP: 0.0,
        MIN_RUNNING_REQUESTS: capacity_violation(cfg, max_running_requests),
        TTFT_P99: ttft,
        ITL_P50: itl,
        DEGENERATE: degenerate,
    }
    return Score(values, constraints)


#: A constraint whose chance of holding lies between these is a close call: its level is
#: measured again (once) and the trial says the verdict was close. A verdict nine times
#: likelier one way than the other is taken: otherwise every clean level of ten requests
#: (0 loops in 10 leaves p = 0.92 for a 0.2 limit) would be measured twice.
CLOSE_LOW, CLOSE_HIGH = 0.1, 0.9
_Z95 = 1.959964


@dataclass(frozen=True)
class Judged:
    """One constraint judged with the uncertainty of what it is judged on."""

    key: str
    statistic: str
    """The level field it limits (degenerate_share, ttft_ms_p99, itl_ms_p50)."""
    limit: float
    value: float
    """At the level that decides it (the least likely to hold)."""
    low: float | None
    high: float | None
    """Its 95 % interval there (None: the level kept no requests to say)."""
    level: int
    p_holds: float
    """Chance that it holds at every level."""

    @property
    def close(self) -> bool:
        return CLOSE_LOW < self.p_holds < CLOSE_HIGH

    def attrs(self) -> dict[str, Any]:
        return {
            "statistic": self.statistic,
            "limit": self.limit,
            "value": round(self.value, 4),
            "interval": None
            if self.low is None or self.high is None
            else [round(self.low, 4), round(self.high, 4)],
            "level": self.level,
            "p_holds": round(self.p_holds, 4),
            "close": self.close,
        }


def judged(
    cfg: ObjectiveConfig, levels: Sequence[int], results: Mapping[int, Mapping[str, Any]]
) -> dict[str, Judged]:
    """Every measured constraint with the chance that it holds, from each level's interval.

    The interval's side towards the limit gives a normal sd (a share's Wilson interval is
    lopsided near 0); a level holds with Phi((limit - value) / sd), every level must.
    """
    c = cfg.constraints
    greedy = all(results[lv].get("workload") == "greedy" for lv in levels)
    limits = [
        (TTFT_P99, "ttft_ms_p99", c.max_ttft_p99_ms),
        (ITL_P50, "itl_ms_p50", c.max_itl_p50_ms),
        (DEGENERATE, "degenerate_share", None if greedy else c.max_degenerate_share),
    ]
    out: dict[str, Judged] = {}
    for key, stat, limit in limits:
        if limit is None:
            continue
        rows = []
        for lv in levels:
            value = results[lv].get(stat)
            if value is None:
                continue
            interval = (results[lv].get("intervals") or {}).get(stat)
            low, high = (float(interval[0]), float(interval[1])) if interval else (None, None)
            rows.append((lv, float(value), low, high, _p_holds(float(value), low, high, limit)))
        if not rows:
            continue
        lv, value, low, high, _ = min(rows, key=lambda r: (r[4], -r[1]))
        p = math.prod(r[4] for r in rows)
        out[key] = Judged(key, stat, float(limit), value, low, high, lv, p)
    return out


def _p_holds(value: float, low: float | None, high: float | None, limit: float) -> float:
    if low is None or high is None:
        return 1.0 if value <= limit else 0.0
    side = (high - value) if limit >= value else (value - low)
    sd = side / _Z95
    if sd <= 0:
        return 1.0 if value <= limit else 0.0
    return 0.5 * math.erfc(-(limit - value) / (sd * math.sqrt(2)))


def unusable(
    cfg: ObjectiveConfig,
    levels: Sequence[int],
    *,
    server_up: bool,
    max_running_requests: int | None = None,
) -> Score:
    """Score a config that was not benchmarked: the server failed, or its capacity is too low.

    The value is 0 tok/s (it served nothing the user can use); the constraints
    make it infeasible, which is what the sampler learns from.
    """
    constraints = dict.fromkeys(CONSTRAINT_KEYS, 0.0)
    constraints[SERVER_UP] = 0.0 if server_up else 1.0
    constraints[MIN_RUNNING_REQUESTS] = (
        max(capacity_violation(cfg, max_running_requests), 0.0) if server_up else 1.0
    )
    return Score([0.0] * n_objectives(cfg, levels), constraints)


def highest_meeting(rates: Sequence[Mapping[str, Any]]) -> float:
    """The highest rate that met the SLOs with every lower rate measured meeting them too
    (a rate that passes above a failing one is luck, not capacity); 0 when none did."""
    best = 0.0
    for r in sorted(rates, key=lambda r: float(r["rate"])):
        if not r["meets_slo"]:
            break
        best = float(r["rate"])
    return best


def _geomean(xs: list[float]) -> float:
    if any(x <= 0 for x in xs):
        return 0.0
    return math.exp(sum(math.log(x) for x in xs) / len(xs))
