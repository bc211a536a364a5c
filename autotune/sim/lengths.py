"""How long the simulated replies are, and the decode steps a reply takes: a natural
reply ends at EOS (a log-normal length cut at max_tokens), a greedy one runs to max_tokens."""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist

# Natural replies end at EOS: a log-normal length (median, sigma), cut at max_tokens.
NATURAL_MEDIAN_TOKENS = 180.0
NATURAL_SIGMA = 0.85


@lru_cache(maxsize=256)
def output_length_pmf(workload: str, max_tokens: int) -> tuple[float, ...]:
    """P(output length = 1..max_tokens)."""
    if workload == "greedy" or max_tokens <= 1:
        return (0.0,) * (max_tokens - 1) + (1.0,)
    mu = math.log(NATURAL_MEDIAN_TOKENS)
    s = NATURAL_SIGMA * math.sqrt(2.0)

    def cdf(x: float) -> float:
        return 0.5 * (1.0 + math.erf((math.log(x) - mu) / s))

    pmf = [cdf(1.5)]
    pmf += [cdf(n + 0.5) - cdf(n - 0.5) for n in range(2, max_tokens)]
    pmf.append(1.0 - cdf(max_tokens - 0.5))
    return tuple(pmf)


def sample_output_length(u: float, workload: str, max_tokens: int) -> int:
    """Inverse-CDF draw from `output_length_pmf` given a uniform `u` in [0, 1)."""
    if workload == "greedy" or max_tokens <= 1:
        return max(1, max_tokens)
    x = math.exp(math.log(NATURAL_MEDIAN_TOKENS) + NATURAL_SIGMA * _norm_ppf(u))
    return max(1, min(max_tokens, round(x)))


def _norm_ppf(u: float) -> float:
    return NormalDist().inv_cdf(min(max(u, 1e-12), 1.0 - 1e-12))


@lru_cache(maxsize=8192)
def _steps_to_emit(dist: tuple[float, ...], m_max: int) -> tuple[float, ...]:
    """E[verify steps to emit m tokens] for m = 0..m_max (the last step is cut short)."""
    e = [0.0] * (m_max + 1)
    for m in range(1, m_max + 1):
        acc = 1.0
        for i, p in enumerate(dist):
            k = m - i - 1
            if k > 0:
                acc += p * e[k]
        e[m] = acc
    return tuple(e)


@lru_cache(maxsize=512)
def length_moments(workload: str, max_tokens: int) -> tuple[float, float]:
    pmf = output_length_pmf(workload, max_tokens)
    m1 = sum((i + 1) * p for i, p in enumerate(pmf))
    m2 = sum((i + 1) ** 2 * p for i, p in enumerate(pmf))
    return m1, m2


def expected_decode_steps(dist: tuple[float, ...], workload: str, max_tokens: int) -> float:
    """Mean decode iterations per request (prefill emits the first token)."""
    pmf = output_length_pmf(workload, max_tokens)
    e = _steps_to_emit(dist, max_tokens - 1)
    return sum(p * e[i] for i, p in enumerate(pmf) if p)
