"""Configs as points in [0, 1]^d, the GP's inputs."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

from autotune.space import SearchSpace


def features(space: SearchSpace, config: Mapping[str, Any]) -> list[float]:
    """Each tuned parameter of `config` as a number in [0, 1].

    - a numeric choice by rank (topk 1 < 2 < 4 < 8): the tree widens step by
      step, so neighbouring ranks behave alike;
    - a string choice by its position in the list (the space file's order);
    - an integer range by position between the smallest and the largest value
      any config of the space takes, on a log scale when the space says `log`.
      A range that depends on other knobs is placed on that same common scale,
      not inside its own bounds: 8 draft tokens cost the same verify work
      whatever the tree that proposes them (measured: this halves the
      deployments to the optimum in several cells of experiments/sample_efficiency.py).
    """
    spans = _spans(space)
    out = []
    for name in space.order:
        p = space.params[name]
        if p.fixed:
            continue
        if name not in config:
            out.append(0.0)  # the knob does not apply to this config (its `when` is false)
            continue
        v = config[name]
        if p.choices is not None:
            ranked = sorted(p.choices) if p.type != "str" else list(p.choices)  # type: ignore[type-var]
            out.append(ranked.index(v) / max(1, len(ranked) - 1) if v in ranked else 0.5)
        else:
            lo, hi = spans[name]
            out.append(_position(float(v), lo, hi, p.log))
    return out


@functools.cache
def _spans(space: SearchSpace) -> dict[str, tuple[float, float]]:
    """Smallest and largest value of each range parameter over the configs of the space."""
    configs = [c.params for c in space.enumerate()]
    return {
        name: (min(values), max(values))
        for name, p in space.params.items()
        if not p.fixed
        and p.choices is None
        and (values := [float(c[name]) for c in configs if name in c])
    }


def _position(v: float, lo: float, hi: float, log: bool) -> float:
    if hi <= lo:
        return 0.5
    if log and lo > 0:
        return min(max(math.log(v / lo) / math.log(hi / lo), 0.0), 1.0)
    return min(max((v - lo) / (hi - lo), 0.0), 1.0)
