"""Per-request token accounting: chunk weights scaled to the server's count."""

from __future__ import annotations

import random

import pytest

from autotune.bench.record import RequestRecord, apportion, recount_tokens


def test_apportion_sums_to_total_and_gives_every_text_chunk_a_token() -> None:
    rng = random.Random(1)
    for _ in range(500):
        weights = [rng.choice([0.0, 1.0, 1.5, 3.25, 7.0]) for _ in range(rng.randint(1, 30))]
        total = rng.randint(0, 120)
        counts = apportion(weights, total)
        assert sum(counts) == total
        assert all(c >= 0 for c in counts)
        positive = sum(w > 0 for w in weights)
        if positive and total >= positive:
            assert all(c >= 1 for c, w in zip(counts, weights, strict=True) if w > 0)


def test_apportion_is_proportional() -> None:
    assert apportion([1.0, 3.0, 3.0, 3.0], 10) == [1, 3, 3, 3]
    assert apportion([2.0, 2.0], 8) == [4, 4]
    assert apportion([], 5) == []


def test_recount_never_below_one_token_per_chunk() -> None:
    assert recount_tokens("abcdefgh", 1) == 2
    assert recount_tokens("a b c", 5) == 5


def test_tokens_without_text_land_at_the_end() -> None:
    rec = RequestRecord(0, 0, 8)
    rec.start, rec.end = 1.0, 2.0
    rec.finalize(3)
    assert rec.times == [2.0] and rec.counts == [3] and rec.ttft() == pytest.approx(1.0)


def test_exact_counts_are_kept() -> None:
    rec = RequestRecord(0, 0, 8)
    rec.add_tokens(1.0, 1, "a")
    rec.add_tokens(1.2, 4, "bcde")
    rec.add_tokens(1.3, 0, "f")  # text without a new token (partial character)
    rec.finalize(5)
    assert rec.counts == [1, 4, 0]
    # The zero-token chunk neither makes a latency nor breaks the next gap.
    assert rec.itl_samples() == [(pytest.approx(0.05), 4)]
