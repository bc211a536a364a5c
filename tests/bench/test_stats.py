"""Percentiles and the batch-means confidence interval."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from autotune.bench.stats import batch_means_ci, lag1_autocorrelation, t975, weighted_percentiles


def test_weighted_percentiles_match_numpy_on_the_expanded_list() -> None:
    rng = random.Random(3)
    for _ in range(50):
        pairs = [(rng.random(), rng.randint(1, 6)) for _ in range(rng.randint(1, 40))]
        expanded = [v for v, n in pairs for _ in range(n)]
        got = weighted_percentiles(pairs, (0, 50, 90, 99, 100))
        want = np.percentile(expanded, [0, 50, 90, 99, 100])
        assert got == pytest.approx(list(want))


def test_empty_percentiles_are_none() -> None:
    assert weighted_percentiles([], (50,)) == [None]


def test_t_quantiles() -> None:
    assert t975(19) == pytest.approx(2.093)
    assert t975(1000) == pytest.approx(1.96)
    assert math.isinf(t975(0))


def test_ci_covers_the_mean_about_95_percent_for_independent_batches() -> None:
    rng = random.Random(7)
    hits = 0
    for _ in range(2000):
        batches = [rng.gauss(100.0, 5.0) for _ in range(20)]
        m, hw, _ = batch_means_ci(batches)
        hits += abs(m - 100.0) <= hw
    assert 0.92 <= hits / 2000 <= 0.98


def test_positive_autocorrelation_widens_the_interval() -> None:
    rng = random.Random(11)
    x, series = 0.0, []
    for _ in range(20):
        x = 0.8 * x + rng.gauss(0, 1)
        series.append(100 + x)
    r = lag1_autocorrelation(series)
    assert r > 0.3
    _, hw, r2 = batch_means_ci(series)
    m = sum(series) / 20
    sd = math.sqrt(sum((s - m) ** 2 for s in series) / 19)
    plain = t975(19) * sd / math.sqrt(20)
    assert r2 == pytest.approx(r) and hw == pytest.approx(plain * math.sqrt((1 + r) / (1 - r)))
