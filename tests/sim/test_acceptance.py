"""The simulator's own acceptance law: easy and hard decode steps, each with a draft that
holds its accuracy to a horizon (`sim/profiles.Acceptance`)."""

from __future__ import annotations

import pytest

from autotune.sim import model
from autotune.sim.profiles import EASY_SHARE, HARD_FACTOR, PROFILES, Acceptance

CURVES = [
    pytest.param(getattr(p, w), id=f"{name}-{w}")
    for name, p in PROFILES.items()
    for w in ("greedy", "natural")
] + [
    pytest.param(model.NGRAM_GREEDY, id="ngram-greedy"),
    pytest.param(model.NGRAM_NATURAL, id="ngram-natural"),
]
STEPS = 8


def _reach(acc: Acceptance) -> list[float]:
    """P(at least j + 1 drafts accepted), j = 0 .. STEPS - 1, on a chain."""
    dist = model._accept_dist(acc, STEPS, 1, STEPS + 1)
    return [sum(dist[j + 1 :]) for j in range(STEPS)]


@pytest.mark.parametrize("acc", CURVES)
def test_a_chain_reaches_each_depth_as_the_two_classes_mixed(acc: Acceptance) -> None:
    reach = _reach(acc)
    for j in range(STEPS):
        easy = hard = 1.0
        for a, h in zip(acc.alphas(j + 1), acc.alphas(j + 1, HARD_FACTOR), strict=True):
            easy, hard = easy * a, hard * h
        assert reach[j] == pytest.approx(EASY_SHARE * easy + (1 - EASY_SHARE) * hard)


@pytest.mark.parametrize("acc", CURVES)
def test_hard_steps_fail_early_so_a_deep_draft_is_accepted_more_often_than_on_average(
    acc: Acceptance,
) -> None:
    """The chains that survive to depth j are mostly easy ones: the acceptance at depth j
    given j - 1 is above the two classes' chances averaged with their shares."""
    reach = _reach(acc)
    for j in range(1, STEPS):
        given = reach[j] / reach[j - 1]
        average = (
            EASY_SHARE * acc.alphas(j + 1)[j] + (1 - EASY_SHARE) * acc.alphas(j + 1, HARD_FACTOR)[j]
        )
        assert given > average, (j, given, average)
