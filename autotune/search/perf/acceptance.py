"""Accept length of any draft shape, from what the deployed ones accepted.

A chain of k drafted tokens is accepted up to its first miss: with `reach[i]`
the chance that at least i drafts of a verify step are accepted, the mean
tokens a step emits (the bonus token included) is `1 + reach[1] + ... +
reach[k]`, and a shallower chain of the same drafter reaches each position
as often. So one deep deployment whose server counts acceptance per position
(SGLang's per-request `spec_correct_drafts_histogram`, vLLM's per-position
counters) measures what every shallower chain would accept; a server that
only gives the mean (llama.cpp's `timings`) pins one sum per deployment.

Positions no deployment reached are extrapolated by a three-parameter curve
of the conditional acceptance, `alpha_j = a * r ** (j ** p)` (j = 0 for the
first draft), fitted to every chain seen. A tree (topk > 1) is the one SGLang
builds (`engines/sglang_tree.py`: beams of topk, then the draft tokens' best
nodes by cumulative draft probability), over a draft whose first `w` guesses
at depth j cover `1 - (1 - alpha_j) * omega ** log2(w)` of the target's
tokens; omega is fitted to the trees deployed (a wide prior before the first).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autotune.engines import sglang_tree

#: Grid the curve's parameters are fitted on (cheap, deterministic, no optimiser).
_A = np.linspace(0.05, 0.995, 39)
_R = np.linspace(0.4, 1.0, 31)
_P = np.array([0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0])
#: Deepest position the curve is tabulated for.
MAX_DEPTH = 64
#: omega before any tree was deployed, and the values a fit tries.
OMEGA_PRIOR = 0.6
_OMEGA = np.linspace(0.2, 1.0, 41)
#: Relative error of a predicted accept length: a measured chain (beyond the sampling error
#: of the verify steps counted, when the server said how many), each position extrapolated
#: past the deepest measured one, a tree by a fitted and by the prior omega.
SD_MEASURED = 0.01
SD_PER_EXTRAPOLATED = 0.04
SD_TREE_FITTED = 0.03
SD_TREE_PRIOR = 0.12
#: A tree's sd per doubling of topk away from the nearest width of a tree deployed: omega
#: is one number fitted where trees ran, and the rank law it stands for is the model's own
#: (a real drafter's tail need not fall as omega ** log2(w) does).
SD_TREE_PER_DOUBLING = 0.04


@dataclass(frozen=True)
class Seen:
    """What one deployment accepted: its shape and mean accept length, and the per-position
    reach when the server counted it (reach[i - 1] = P(at least i drafts accepted))."""

    steps: int
    topk: int
    draft: int
    accept_length: float
    reach: tuple[float, ...] | None = None
    drafts: float | None = None
    """Verify steps the reach was counted on (None: the server did not say)."""

    @property
    def depth(self) -> int:
        return max(0, min(self.steps, self.draft - 1))

    @property
    def chain(self) -> bool:
        return self.topk == 1 or self.draft - 1 <= self.depth


@dataclass(frozen=True)
class Acceptance:
    """The fitted acceptance of one drafter on one workload."""

    measured_reach: tuple[float, ...]
    """Pooled reach of the positions some deployment counted (empty: none counted)."""
    measured_drafts: tuple[float | None, ...]
    """Verify steps behind each measured position (None: some row's count unknown)."""
    curve: tuple[float, float, float]
    """(a, r, p) of the conditional acceptance past the measured positions."""
    omega: float
    trees_seen: int
    chains_seen: int
    chain_depths: tuple[int, ...] = ()
    """Depths of the chains deployed: where a mean accept length pins the curve."""
    shapes: tuple[tuple[int, int, int], ...] = ()
    """(steps, topk, draft) of every speculating deployment."""

    @classmethod
    def fit(cls, seen: Sequence[Seen]) -> Acceptance | None:
        """None when nothing speculating was deployed."""
        drafting = [s for s in seen if s.depth > 0 and s.accept_length > 0]
        if not drafting:
            return None
        measured, counted = _pooled_reach(drafting)
        chains = [s for s in drafting if s.chain]
        trees = [s for s in drafting if not s.chain]
        curve = _fit_curve(chains or drafting, measured)
        model = cls(
            measured, counted, curve, OMEGA_PRIOR, len(trees), len(chains),
            tuple(sorted({s.depth for s in chains})),
            tuple(sorted({(s.steps, s.topk, s.draft) for s in drafting})),
        )  # fmt: skip
        if trees:
            model = _fit_omega(model, trees)
        return model

    def alphas(self, depth: int) -> list[float]:
        """Conditional acceptance of positions 1..depth of a chain."""
        a, r, p = self.curve
        out: list[float] = []
        prev = 1.0
        for j in range(depth):
            if j < len(self.measured_reach):
                reach = self.measured_reach[j]
                out.append(min(1.0, reach / prev) if prev > 0 else 0.0)
                prev = reach
            else:
                out.append(a * r ** (j**p))
        return out

    def length(self, steps: int, topk: int, draft: int) -> float:
        """Mean tokens one verify step emits, the bonus token included."""
        return _length(self, steps, topk, draft)

    def _length(self, steps: int, topk: int, draft: int) -> float:
        depth = max(0, min(steps, draft - 1))
        if depth == 0:
            return 1.0
        # Rounded to 0.002 (an accept length to well under 1 %): fits that differ by less
        # share the cached trees.
        alphas = tuple(round(x * 500) / 500 for x in self.alphas(steps))
        return tree_length(alphas, topk, draft, self.omega)

    def relative_sd(self, steps: int, topk: int, draft: int) -> float:
        """How well the prediction is known, relative to it: measured positions to their
        counts; past them, or away from the depths deployed when the server gave only a
        mean (a deployed chain's mean is measured; a depth none ran is extrapolated, one
        position per step of distance from the nearest that did). A tree's mean pins the
        positions it reached as a chain's does (both are sums of the same alphas, the
        tree's through omega): after a (6, 4, 18) tree an 8-step chain is two positions
        out, not five from the baseline's depth 3."""
        depth = max(0, min(steps, draft - 1))
        if self.measured_reach:
            extrapolated = max(0, depth - len(self.measured_reach))
        elif (steps, topk, draft) in self.shapes or depth in self.chain_depths:
            extrapolated = 0
        elif self.shapes:
            depths = {min(s, d - 1) for s, _, d in self.shapes}
            extrapolated = max(1, min(abs(depth - d) for d in depths))
        else:
            extrapolated = depth
        sd = math.hypot(SD_MEASURED, self._sampling_sd(depth)) + SD_PER_EXTRAPOLATED * extrapolated
        if topk > 1 and draft - 1 > depth:
            sd += self._tree_sd(topk)
        return sd

    def _tree_sd(self, topk: int) -> float:
        """The tree's own part: the prior's before any tree ran, else growing with how many
        doublings of width lie between this topk and the nearest deployed tree's."""
        widths = {k for s, k, d in self.shapes if k > 1 and d - 1 > min(s, d - 1)}
        if not self.trees_seen or not widths:
            return SD_TREE_PRIOR
        doublings = min(abs(math.log2(topk) - math.log2(k)) for k in widths)
        return min(SD_TREE_PRIOR, SD_TREE_FITTED + SD_TREE_PER_DOUBLING * doublings)

    def _sampling_sd(self, depth: int) -> float:
        """Relative standard error of the measured positions' accept length; a deep chain
        counted on a few dozen steps knows it to 5-10 %, not to SD_MEASURED's 1 %."""
        n = min(depth, len(self.measured_reach))
        counts = self.measured_drafts[:n]
        if n == 0 or any(c is None or c <= 0 for c in counts):
            return 0.0
        reach = self.measured_reach[:n]
        steps = min(c for c in counts if c is not None)
        return length_sampling_sd(reach, steps) / (1 + sum(reach))


def length_sampling_sd(reach: Sequence[float], steps: float) -> float:
    """Standard error of a mean accept length `1 + reach[1..n]` counted on `steps` verify
    steps. The positions' hits are nested (reaching j means reaching every i < j), so the
    covariance of i and j > i is reach[j] * (1 - reach[i]) and adds to the variances."""
    n = len(reach)
    var = sum(x * (1 - x) for x in reach)
    var += 2 * sum(reach[j] * (1 - reach[i]) for i in range(n) for j in range(i + 1, n))
    return math.sqrt(max(0.0, var) / steps)


@lru_cache(maxsize=65536)
def _length(model: Acceptance, steps: int, topk: int, draft: int) -> float:
    return model._length(steps, topk, draft)


@lru_cache(maxsize=65536)
def tree_length(alphas: tuple[float, ...], topk: int, draft: int, omega: float) -> float:
    """Mean tokens per verify step of the tree SGLang builds from `steps` = len(alphas)
    draft passes of `topk` candidates, `draft` tokens verified (the root included)."""
    dist = tree_accept_dist(alphas, topk, draft, omega)
    return sum((i + 1) * p for i, p in enumerate(dist))


def tree_accept_dist(
    alphas: Sequence[float], topk: int, draft: int, omega: float
) -> tuple[float, ...]:
    """P(tokens emitted per verify step = 1, 2, ...) of that tree (the bonus token counts):
    SGLang's tree (`engines/sglang_tree.py`) over the model's rank law, the first `w`
    guesses at depth j covering `1 - (1 - alpha_j) * omega ** log2(w)` of its tokens."""
    ranks = [_rank_chances(a, max(1, topk), omega) for a in alphas]
    return sglang_tree.accept_dist(ranks, topk, draft)


def _rank_chances(alpha: float, topk: int, omega: float) -> list[float]:
    covered = [1.0 - (1.0 - alpha) * omega ** math.log2(w) for w in range(1, topk + 1)]
    return [covered[0]] + [covered[i] - covered[i - 1] for i in range(1, topk)]


def reach_from_histogram(histogram: Sequence[int]) -> tuple[float, ...] | None:
    """P(at least i drafts accepted), i = 1.., from counts of verify steps that accepted
    exactly 0, 1, 2, ... drafts (SGLang's `spec_correct_drafts_histogram`)."""
    total = sum(histogram)
    if total <= 0:
        return None
    tail = list(itertools.accumulate(reversed(histogram)))[::-1]
    return tuple(t / total for t in tail[1:])


def _pooled_reach(seen: Sequence[Seen]) -> tuple[tuple[float, ...], tuple[float | None, ...]]:
    """Reach per position over the chains that counted it, weighted by their verify steps
    when every row says how many (a tree's positions are widened: not the chain's), and
    the steps behind each position."""
    rows = [(s.reach[: s.depth], s.drafts) for s in seen if s.reach and s.chain]
    if not rows:
        return (), ()
    deepest = max(len(r) for r, _ in rows)
    out: list[float] = []
    counted: list[float | None] = []
    for i in range(deepest):
        vals = [(r[i], n) for r, n in rows if len(r) > i]
        weights = [n for _, n in vals]
        if all(w is not None and w > 0 for w in weights):
            total = float(sum(w for w in weights if w is not None))
            out.append(sum(v * (w or 0.0) for v, w in vals) / total)
            counted.append(total)
        else:
            out.append(float(np.mean([v for v, _ in vals])))
            counted.append(None)
    # Reach never grows with depth (averaging rows of different depths could make it).
    return tuple(itertools.accumulate(out, min)), tuple(counted)


@lru_cache(maxsize=1)
def _curve_grid() -> tuple[np.ndarray, np.ndarray]:
    """Every (a, r, p) of the grid and its cumulative reach over MAX_DEPTH positions."""
    params = np.array(list(itertools.product(_A, _R, _P)))
    j = np.arange(MAX_DEPTH, dtype=float)
    alphas = params[:, :1] * params[:, 1:2] ** (j[None, :] ** params[:, 2:3])
    return params, np.cumprod(np.clip(alphas, 0.0, 1.0), axis=1)


def _fit_curve(seen: Sequence[Seen], measured: tuple[float, ...]) -> tuple[float, float, float]:
    """Least squares over the grid: the counted reach, and each chain's mean accept length
    (a tree's length bounds the chain's from above and says little: used only when nothing
    else was seen). A weak pull towards slow decay breaks ties."""
    params, reach = _curve_grid()
    sse = np.zeros(len(params))
    for i, r in enumerate(measured):
        sse += (reach[:, i] - r) ** 2
    for s in seen:
        d = min(s.depth, MAX_DEPTH)
        predicted = 1.0 + reach[:, :d].sum(axis=1)
        sse += ((predicted - s.accept_length) / max(1.0, d**0.5)) ** 2
    sse += 1e-4 * ((params[:, 1] - 0.9) ** 2 + np.log(params[:, 2]) ** 2)
    a, r, p = params[int(np.argmin(sse))]
    return float(a), float(r), float(p)


def _fit_omega(model: Acceptance, trees: Sequence[Seen]) -> Acceptance:
    def err(omega: float) -> float:
        probe = dataclasses.replace(model, omega=float(omega), trees_seen=0)
        return sum((probe.length(s.steps, s.topk, s.draft) - s.accept_length) ** 2 for s in trees)

    errors = [err(w) + 1e-4 * (w - OMEGA_PRIOR) ** 2 for w in _OMEGA]
    omega = float(_OMEGA[int(np.argmin(errors))])
    return dataclasses.replace(model, omega=omega, trees_seen=len(trees))
