"""Predict max_running_requests before deploying, and skip a restart whose outcome is known.

A config whose server will run fewer requests at once than
`objective.constraints.min_running_requests` is infeasible, but finding out
costs a model load (90-100 s on the calibration box, minutes on a big one).
The engine sizes its pools by a known rule: a decode step of SGLang 0.5.16+
allocates `max(steps * topk, draft)` KV tokens per running request (the space
file's `memory_per_request`, m), and the workspace and hybrid state that go
with it come out of a fixed budget, so the number of requests it plans for
falls as m grows. Two predictions come from the configs deployed
so far, among those that differ only in knobs m depends on:

- *monotone*: a config with m at least that of one that already fell short
  falls short too (certain, given the rule);
- *fitted*: 1 / max_running_requests is close to linear in m (exactly so for
  a pool of P tokens split as P / (slot + m)); a least-squares line over at
  least MIN_POINTS uncapped points gives a 99 % prediction interval, widened
  to at least REL_FLOOR of the prediction (the per-graph workspace the line
  ignores) and to half a request (the engine truncates its count). The
  interval's top below the floor skips the config, unless a deployed config
  with a larger m reached the floor (the line is then wrong there, whatever
  it says).

A skipped config is recorded as an infeasible trial with the prediction, its
interval and the basis (`failure: capacity_predicted`); nothing is deployed.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.config import Config
from autotune.search import objective, records
from autotune.space import SearchSpace

FAILURE = "capacity_predicted"
MIN_POINTS = 3
REL_FLOOR = 0.03
#: Two-sided 99 % Student t quantiles (0.995) by degrees of freedom; beyond the table, 2.576.
_T995 = {1: 63.66, 2: 9.925, 3: 5.841, 4: 4.604, 5: 4.032, 6: 3.707, 7: 3.499, 8: 3.355,
         9: 3.250, 10: 3.169, 12: 3.055, 15: 2.947, 20: 2.845, 30: 2.750}  # fmt: skip


@dataclass(frozen=True)
class Prediction:
    max_running_requests: float
    low: float
    high: float
    """99 % interval of max_running_requests (the top is what a skip is decided on)."""
    basis: str
    """How it was predicted, for the record: the fit and its points, or the config that
    already fell short."""

    def attrs(self, floor: int) -> dict[str, Any]:
        point = round(self.max_running_requests, 1)
        return {
            records.FAILURE: FAILURE,
            records.REASON: (
                f"predicted max_running_requests {point:g} (99 % interval "
                f"{self.low:.0f}-{self.high:.0f}) is below the required {floor}: {self.basis}; "
                "not deployed"
            ),
            records.PREDICTED_MAX_RUNNING_REQUESTS: point,
            records.PREDICTED_INTERVAL: [round(self.low, 1), round(self.high, 1)],
            records.DEPLOYED: False,
        }


def below_floor(cfg: Config, study: optuna.Study, config: Mapping[str, Any]) -> Prediction | None:
    """A confident prediction that `config` falls short of min_running_requests, else None."""
    floor = cfg.objective.constraints.min_running_requests
    if not cfg.study.predict_capacity or floor is None:
        return None
    m = cfg.space.memory_tokens(config)
    if m is None:
        return None
    points = observations(cfg.space, study.get_trials(deepcopy=False), config)
    return predict_from(points, m, floor)


def predict_from(points: Sequence[tuple[float, int]], m: float, floor: int) -> Prediction | None:
    """From (reserved tokens, max_running_requests) of deployed configs: a confident
    prediction that a config reserving `m` tokens runs fewer than `floor` requests, else None."""
    if any(pm >= m and running >= floor for pm, running in points):
        return None  # a bigger reservation reached the floor: no rule says this one won't
    short = [(pm, running) for pm, running in points if pm <= m and running < floor]
    if short:
        pm, running = max(short, key=lambda p: p[0])
        return Prediction(
            running,
            0.0,
            running,
            f"a config reserving {pm:g} tokens per request ran {running}, this one reserves {m:g}",
        )
    # Only beyond the largest reservation deployed: the pools shrink as m grows (the
    # workspace per graph), so 1 / running is convex in m, and a line through deployed
    # points runs above it between them (too few requests: a wrong skip) but below it
    # past them (too many: never a wrong skip).
    bounds = rule_bounds(points, m) if points and m > max(pm for pm, _ in points) else None
    if bounds is not None and bounds[1] < floor:
        low, high = bounds
        return Prediction(
            2.0 / (1.0 / low + 1.0 / high),
            low,
            high,
            f"the engine's memory rule (1/max_running_requests linear in the tokens reserved "
            f"per request) through {len(points)} deployed configs",
        )
    p = fit(points, m)
    if p is not None and p.high < floor:
        return p
    return None


def observations(
    space: SearchSpace, trials: Sequence[FrozenTrial], config: Mapping[str, Any]
) -> list[tuple[float, int]]:
    """(tokens reserved per request, max_running_requests) of every deployed config that
    differs from `config` only in knobs `memory_per_request` depends on."""
    e = space.memory_per_request
    assert e is not None
    others = {n: v for n, v in config.items() if n not in e.names}
    out = []
    for t in records.measured(trials):
        running = t.user_attrs.get(records.MAX_RUNNING_REQUESTS)
        ran = records.config_of(t)
        if not isinstance(running, int) or t.user_attrs.get(records.DEPLOYED) is False:
            continue
        if any(ran.get(n) != v for n, v in others.items()):
            continue
        m = space.memory_tokens(ran)
        if m is not None:
            out.append((m, running))
    return out


def fit(points: Sequence[tuple[float, int]], m: float) -> Prediction | None:
    """The line through (m, 1 / running) of the uncapped points, predicted at `m`.

    The most requests a server ran in two or more configs is its cap
    (`--max-running-requests`), not its memory: those points are left out.
    """
    if not points:
        return None
    top = max(r for _, r in points)
    capped = sum(r == top for _, r in points) >= 2
    pts = sorted({(pm, r) for pm, r in points if not (capped and r == top)})
    if len({pm for pm, _ in pts}) < MIN_POINTS:
        return None
    n = len(pts)
    xs = [pm for pm, _ in pts]
    # The engine truncates its count: a reported r stands for anything in [r, r + 1).
    ys = [1.0 / (r + 0.5) for _, r in pts]
    xbar, ybar = sum(xs) / n, sum(ys) / n
    sxx = sum((x - xbar) ** 2 for x in xs)
    slope = sum((x - xbar) * (y - ybar) for x, y in zip(xs, ys, strict=True)) / sxx
    inter = ybar - slope * xbar
    resid = [y - (inter + slope * x) for x, y in zip(xs, ys, strict=True)]
    dof = n - 2
    s = math.sqrt(sum(r * r for r in resid) / dof) if dof > 0 else 0.0
    inv = inter + slope * m
    if inv <= 0:
        return None  # beyond where the line says memory is unlimited: no prediction
    # At least REL_FLOOR of the prediction, and the truncation's half step (a third of the
    # value at two requests).
    rel = max(REL_FLOOR, 0.5 * inv)
    se = max(s * math.sqrt(1.0 + 1.0 / n + (m - xbar) ** 2 / sxx), rel * inv)
    q = _t995(max(dof, 1))
    low_inv, high_inv = inv - q * se, inv + q * se
    high = math.inf if low_inv <= 0 else 1.0 / low_inv
    return Prediction(
        1.0 / inv - 0.5,
        max(0.0, 1.0 / high_inv - 0.5),
        high,
        f"fitted over {n} deployed configs (1/max_running_requests linear in the tokens "
        "reserved per request)",
    )


def score(cfg: Config, p: Prediction) -> objective.Score:
    """The infeasible score a skipped config is recorded with (the predicted shortfall)."""
    return objective.unusable(
        cfg.objective,
        cfg.benchmark.concurrency,
        server_up=True,
        max_running_requests=int(p.max_running_requests),
    )


def _t995(dof: int) -> float:
    known = [d for d in _T995 if d <= dof]
    return _T995[max(known)] if dof <= 30 else 2.576


def rule_bounds(points: Sequence[tuple[float, int]], m: float) -> tuple[float, float] | None:
    return _rule_bounds(tuple(sorted(set(points))), float(m))


@functools.lru_cache(maxsize=16384)
def _rule_bounds(points: tuple[tuple[float, int], ...], m: float) -> tuple[float, float] | None:
    """What max_running_requests at `m` can be, if the engine's rule holds exactly.

    The rule makes 1 / running a line `a + b m` with a, b >= 0 (a request's fixed
    share, and more per token reserved), and the engine truncates its count: a
    reported r says the line lies in (1 / (r + 1), 1 / r] at its m (a point at the cap
    -- the most requests two or more configs ran -- only that it lies at or below
    1 / cap). One deployment bounds every other m (between "only the fixed share" and
    "no fixed share"); two at different m pin the line up to the truncation. The
    range of the line at `m` over every line allowed (vertices of a polygon in
    (a, b)), widened by REL_FLOOR for the per-graph workspace the line ignores, gives
    the bounds. None without points, or when no line passes them all (the rule does
    not hold on this server).
    """
    if not points:
        return None
    top = max(r for _, r in points)
    capped = sum(r == top for _, r in points) >= 2
    # Half-planes  lo <= ca a + cb b <= hi.
    rows: list[tuple[float, float, float, float]] = [
        (1.0, 0.0, 0.0, math.inf),
        (0.0, 1.0, 0.0, math.inf),
    ]
    for pm, r in sorted(set(points)):
        if r >= 1:
            lo = 0.0 if capped and r == top else 1.0 / (r + 1)
            rows.append((1.0, pm, lo, 1.0 / r))
    lines = {(ca, cb, v) for ca, cb, lo, hi in rows for v in (lo, hi) if math.isfinite(v)}
    eps = 1e-12
    values = []
    for (a1, b1, v1), (a2, b2, v2) in itertools.combinations(sorted(lines), 2):
        det = a1 * b2 - a2 * b1
        if abs(det) < 1e-15:
            continue
        a = (v1 * b2 - v2 * b1) / det
        b = (a1 * v2 - a2 * v1) / det
        if all(lo - eps <= ca * a + cb * b <= hi + eps for ca, cb, lo, hi in rows):
            values.append(a + b * m)
    if not values:
        return None
    low_inv, high_inv = min(values) * (1 - REL_FLOOR), max(values) * (1 + REL_FLOOR)
    high = math.inf if low_inv <= 0 else 1.0 / low_inv
    return (0.0 if high_inv <= 0 else 1.0 / high_inv), high


def chance_reaches(points: Sequence[tuple[float, int]], m: float, floor: int) -> float | None:
    """The chance that a config reserving `m` tokens per request runs at least `floor`
    requests: certain either way where a deployed config settles it (the rule is
    monotone in m), else the share of its bounds at or above the floor: the deployed
    neighbours' counts between two of them, the rule's line past them (None without
    points, or where the rule does not hold)."""
    if any(pm >= m and r >= floor for pm, r in points):
        return 1.0
    if any(pm <= m and r < floor for pm, r in points):
        return 0.0
    below = [r for pm, r in points if pm < m]
    above = [r for pm, r in points if pm > m]
    if below and above:
        # Between two deployed reservations the rule's line runs above the convex truth
        # (see predict_from): the neighbours' counts bound it instead.
        low, high = float(max(above)), float(min(below) + 1)
    else:
        b = rule_bounds(points, m)
        if b is None:
            return None
        low, high = b
    if low >= floor:
        return 1.0
    if high < floor:
        return 0.0
    # Uniform in 1 / running between the bounds.
    lo_inv, hi_inv = 1.0 / high if math.isfinite(high) else 0.0, 1.0 / max(low, 1e-9)
    return min(1.0, max(0.0, (1.0 / floor - lo_inv) / (hi_inv - lo_inv)))
