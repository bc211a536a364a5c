"""The simulator's draft tree: SGLang's beams and top-scored nodes, a calibrated draft."""

from __future__ import annotations

import itertools
import math

import pytest

from autotune.sim import tree

ALPHAS = (0.72, 0.62, 0.5)


def _mean(dist: tuple[float, ...]) -> float:
    return sum((i + 1) * p for i, p in enumerate(dist))


def test_a_chain_accepts_each_depth_with_the_product_of_its_alphas() -> None:
    dist = tree.accept_dist(ALPHAS, 1, 4, 0.55)
    assert sum(dist) == pytest.approx(1.0)
    assert _mean(dist) == pytest.approx(1 + 0.72 + 0.72 * 0.62 + 0.72 * 0.62 * 0.5)
    # Fewer draft tokens than steps: the chain is cut to them.
    assert _mean(tree.accept_dist(ALPHAS, 1, 3, 0.55)) == pytest.approx(1 + 0.72 + 0.72 * 0.62)


def test_the_second_guess_catches_all_but_width_miss_of_the_misses() -> None:
    dist = tree.accept_dist(ALPHAS[:1], 2, 3, 0.55)
    assert 1.0 - dist[0] == pytest.approx(0.72 + 0.28 * (1 - 0.55))


def test_three_tokens_over_two_steps_of_two_take_the_nodes_sglang_scores_highest() -> None:
    """Root candidates 0.72 and 0.126; their expansions 0.72 x 0.62 = 0.446 and below. The
    three best are the first guess, its first-guess child and the root's second guess: the
    second guess has no child in this tree (a width per depth would have given it one)."""
    dist = tree.accept_dist(ALPHAS[:2], 2, 4, 0.55)
    second = 0.28 * 0.45
    assert 1.0 - dist[0] == pytest.approx(0.72 + second)
    assert dist[2] == pytest.approx(0.72 * 0.62)
    assert len(dist) == 3


@pytest.mark.parametrize("steps,topk", [(3, 2), (3, 4), (2, 8)])
def test_more_draft_tokens_never_accept_fewer(steps: int, topk: int) -> None:
    means = [_mean(tree.accept_dist(ALPHAS[:steps], topk, d, 0.6)) for d in range(2, 24)]
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(means)), means
    assert means[-1] > means[0]


def test_the_ranks_fall_off_by_a_zipf_law_whose_second_term_is_set_by_width_miss() -> None:
    for omega in (0.46, 0.55, 0.7):
        chances = tree._rank_chances(0.7, 4, omega)
        assert chances[1] == pytest.approx(0.3 * (1 - omega), rel=1e-6)
        s = tree._exponent(omega)
        assert chances[2] / chances[1] == pytest.approx((2 / 3) ** s)
        assert sum(chances) < 1.0 and not math.isclose(sum(chances), 1.0)
