"""The simulator's EAGLE draft tree: SGLang's tree (`engines/sglang_tree.py`, an engine fact)
over the simulator's own draft.

What the simulator adds is the draft's own distribution over its candidates, which no engine
reports: at depth j the target's token is the draft's first guess with chance alpha_j (the
profile's chain acceptance) and its rank-r guess, r >= 2, with chance (1 - alpha_j) z(r),
z(r) proportional to r**-s (a Zipf law over the ranks, s set so that z(2) catches
`1 - width_miss` of the first guess's misses). The draft is calibrated (its probabilities
are those chances), so a node's cumulative probability is the chance that the target
accepts the path to it, and the chance of accepting at least j drafts is the sum over the
tree's nodes at depth j.

The performance model builds the same tree (an engine fact) over a draft of its own: its
rank law is fitted (`1 - (1 - alpha) * omega ** log2(width)` covered by the first `width`
guesses), the simulator's is this Zipf law, which the model is never told.
"""

from __future__ import annotations

import math
from functools import lru_cache

from autotune.engines import sglang_tree

#: Ranks summed exactly before the Zipf tail is taken as its integral.
_EXACT_RANKS = 2000


@lru_cache(maxsize=8192)
def accept_dist(
    alphas: tuple[float, ...], topk: int, draft: int, width_miss: float
) -> tuple[float, ...]:
    """P(tokens emitted per verify step = 1, 2, ...) of the tree SGLang builds from `steps`
    = len(alphas) draft passes of `topk` candidates each, `draft` tokens in all with the
    root (the bonus token counts)."""
    ranks = [_rank_chances(a, max(1, topk), width_miss) for a in alphas]
    return sglang_tree.accept_dist(ranks, topk, draft)


def _rank_chances(alpha: float, topk: int, width_miss: float) -> list[float]:
    """The chance that the target's token is the draft's rank-r guess, r = 1..topk."""
    z = _zipf(width_miss)
    return [alpha] + [(1.0 - alpha) * z * r ** -_exponent(width_miss) for r in range(2, topk + 1)]


@lru_cache(maxsize=64)
def _zipf(width_miss: float) -> float:
    """The normaliser of z(r) = r**-s / sum over r >= 2 of r**-s."""
    return 1.0 / _tail_sum(_exponent(width_miss))


@lru_cache(maxsize=64)
def _exponent(width_miss: float) -> float:
    """The Zipf exponent s at which the second guess catches 1 - width_miss of the misses."""
    want = min(max(1.0 - width_miss, 1e-6), 1.0 - 1e-6)
    lo, hi = 1.0 + 1e-6, 60.0
    for _ in range(100):  # z(2) rises with s: bisect
        s = (lo + hi) / 2
        if 2.0**-s / _tail_sum(s) < want:
            lo = s
        else:
            hi = s
    return (lo + hi) / 2


def _tail_sum(s: float) -> float:
    """Sum over r >= 2 of r**-s (s > 1)."""
    exact = math.fsum(r**-s for r in range(2, _EXACT_RANKS))
    return exact + _EXACT_RANKS ** (1.0 - s) / (s - 1.0)
