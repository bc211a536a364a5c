"""How well a level knows the statistics a constraint is judged on.

A degenerate share of 3 in 9 requests, or a TTFT p99 over a 10-second window, is a
guess: the same config came out infeasible at 0.333 and feasible at 0.1 in two trials
of the real llama-server. Each constrained statistic gets a 95 % interval here, from
the level's own requests:

- a share (degenerate replies): Wilson's score interval of k in n;
- a latency percentile: resampling the level's requests (a request's inter-token
  latencies move together, so requests, not tokens, are what is resampled).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from autotune.bench.stats import weighted_percentiles

Z95 = 1.959964
RESAMPLES = 300
_Q = (50.0, 90.0, 99.0)


def wilson(k: int, n: int) -> tuple[float, float]:
    """95 % interval of a share of k in n (Wilson's score interval; (0, 1) for n = 0)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    z2 = Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Samples:
    """What each measured request showed, kept with the level to judge and to pool it."""

    ttft_s: tuple[float, ...] = ()
    """First-token latency of each latency request."""
    itl: tuple[tuple[tuple[float, int], ...], ...] = ()
    """Each latency request's inter-token latencies as (seconds, multiplicity)."""
    degenerate: tuple[bool, ...] = ()
    """Per successful request: its reply loops."""

    def scaled(self, k: float) -> Samples:
        """Latencies `k` times longer (a sped-up rehearsal in real-server units)."""
        return Samples(
            tuple(t * k for t in self.ttft_s),
            tuple(tuple((v * k, n) for v, n in r) for r in self.itl),
            self.degenerate,
        )

    def latencies_ms(self) -> dict[str, float | None]:
        """TTFT and ITL percentiles (ms) of these requests, as a level reports them."""
        ttft = weighted_percentiles(((t, 1) for t in self.ttft_s), _Q)
        itl = weighted_percentiles((s for r in self.itl for s in r), _Q)
        out: dict[str, float | None] = {}
        for kind, values in (("ttft_ms", ttft), ("itl_ms", itl)):
            for q, v in zip(("p50", "p90", "p99"), values, strict=True):
                out[f"{kind}_{q}"] = None if v is None else v * 1000.0
        return out

    def plus(self, other: Samples) -> Samples:
        return Samples(
            self.ttft_s + other.ttft_s, self.itl + other.itl, self.degenerate + other.degenerate
        )

    def intervals(self, seed: int = 0) -> dict[str, tuple[float, float]]:
        """95 % intervals of the constrained statistics: degenerate_share, ttft_ms_p99 and
        itl_ms_p50 (ms), each where the level has the requests to say."""
        out: dict[str, tuple[float, float]] = {}
        if self.degenerate:
            out["degenerate_share"] = wilson(sum(self.degenerate), len(self.degenerate))
        rng = np.random.default_rng(seed)
        if len(self.ttft_s) >= 2:
            lo, hi = _resampled([np.array([t]) for t in self.ttft_s], 99.0, rng)
            out["ttft_ms_p99"] = (lo * 1000.0, hi * 1000.0)
        itl = [_expanded(r) for r in self.itl if r]
        if len(itl) >= 2:
            lo, hi = _resampled(itl, 50.0, rng)
            out["itl_ms_p50"] = (lo * 1000.0, hi * 1000.0)
        return out


#: A request's inter-token latencies summarised as this many equally weighted quantiles:
#: resampling stays cheap for long replies (a pooled median moves by well under 1 %).
_QUANTILES = np.linspace(1 / 32, 31 / 32, 16)


def _expanded(pairs: Sequence[tuple[float, int]]) -> np.ndarray:
    values, counts = zip(*pairs, strict=True)
    tokens = np.repeat(np.array(values, dtype=float), np.array(counts, dtype=int))
    if tokens.size <= len(_QUANTILES):
        return tokens
    return np.quantile(tokens, _QUANTILES)


def _resampled(
    requests: Sequence[np.ndarray], q: float, rng: np.random.Generator
) -> tuple[float, float]:
    """2.5th and 97.5th percentiles of the q-th percentile over resampled requests."""
    n = len(requests)
    picks = rng.integers(0, n, size=(RESAMPLES, n))
    stats = np.array(
        [np.percentile(np.concatenate([requests[i] for i in row]), q) for row in picks]
    )
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return float(lo), float(hi)
