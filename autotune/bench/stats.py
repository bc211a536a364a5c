"""Small statistics without numpy: percentiles and a batch-means confidence interval."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

# Two-sided 95 % quantiles of Student's t, by degrees of freedom.
_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042,
    40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip


def t975(df: int) -> float:
    """Student t quantile for a two-sided 95 % interval (rounded df down to the table)."""
    if df < 1:
        return math.inf
    best = max(k for k in _T975 if k <= df)
    return _T975[best] if df <= 120 else 1.960


def weighted_percentiles(
    samples: Iterable[tuple[float, int]], qs: Sequence[float]
) -> list[float | None]:
    """Percentiles (q in 0..100) of values given with integer multiplicities.

    Equal to numpy's default (linear) percentile of the expanded list, without
    expanding it: a request of 3000 tokens in 1000 chunks stays 1000 pairs.
    """
    pairs = sorted((v, n) for v, n in samples if n > 0)
    total = sum(n for _, n in pairs)
    if total == 0:
        return [None] * len(qs)
    out: list[float | None] = []
    for q in qs:
        pos = q / 100.0 * (total - 1)
        lo = math.floor(pos)
        frac = pos - lo
        out.append(_at(pairs, lo) * (1 - frac) + (_at(pairs, lo + 1) * frac if frac else 0.0))
    return out


def _at(pairs: list[tuple[float, int]], index: int) -> float:
    """Value at `index` of the expanded list (clamped to its end)."""
    seen = 0
    for v, n in pairs:
        seen += n
        if index < seen:
            return v
    return pairs[-1][0]


def percentiles(values: Iterable[float], qs: Sequence[float]) -> list[float | None]:
    return weighted_percentiles(((v, 1) for v in values), qs)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def lag1_autocorrelation(values: Sequence[float]) -> float:
    n = len(values)
    if n < 3:
        return 0.0
    m = mean(values)
    dev = [v - m for v in values]
    var = sum(d * d for d in dev)
    if var <= 0:
        return 0.0
    return sum(dev[i] * dev[i + 1] for i in range(n - 1)) / var


def batch_means_ci(batches: Sequence[float]) -> tuple[float, float, float]:
    """Mean, 95 % half-width and lag-1 autocorrelation of a series of batch means.

    Throughput in consecutive stretches of time is correlated (a request's
    prefill slows a few neighbouring batches; outputs of equal length stay in
    step), and a plain standard error would then be too small. The series is
    already batched into stretches much longer than one decode step; any
    positive lag-1 correlation left between batches widens the interval by the
    AR(1) variance factor sqrt((1+r)/(1-r)), r capped at 0.9.
    """
    k = len(batches)
    m = mean(batches)
    if k < 2:
        return m, math.inf, 0.0
    var = sum((b - m) ** 2 for b in batches) / (k - 1)
    r = lag1_autocorrelation(batches)
    inflate = math.sqrt((1 + r) / (1 - r)) if r > 0 else 1.0
    if r > 0.9:
        inflate = math.sqrt(1.9 / 0.1)
    return m, t975(k - 1) * math.sqrt(var / k) * inflate, r
