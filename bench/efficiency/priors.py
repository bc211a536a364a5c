"""A first batch of informative configs, from what is known about speculative decoding.

Run after the baseline instead of random startup trials. Engine facts behind it:
- at high concurrency verify work is paid per request, so short chains (topk 1)
  win; at one request spare compute makes wide trees pay;
- a tree only pays when it is deep enough to use its width, so topk grows with
  steps, and its draft-token budget sits in the upper part of its valid range;
- every knob's effect is unimodal: one short and one long chain, a mid and a
  big tree bracket the optimum of every objective from which the sampler refines.
Points are given as (steps, topk, position of draft tokens in its valid range)
and projected onto the space through its own encoding, so a topk-1 space gets
only the chains, and a point the space cannot express is dropped.
"""

from __future__ import annotations

from typing import Any

from autotune.space import SearchSpace

STEPS, TOPK, DRAFT = (
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)

#: (steps, topk, draft position) in the order they run.
BATCHES: dict[str, tuple[tuple[int, int, float], ...]] = {
    "chains-trees": ((5, 1, 1.0), (4, 4, 0.75), (6, 8, 0.85), (1, 1, 1.0)),
    "trees": ((4, 4, 0.75), (6, 8, 0.85)),
}


def informative_configs(
    space: SearchSpace, batch: str, skip: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The batch's configs as this space runs them; duplicates and `skip` (the baseline) dropped."""
    seen = {space.key(c) for c in skip or []}
    out = []
    for steps, topk, position in BATCHES[batch]:
        config = _project(space, steps, topk, position)
        if config is None or space.key(config) in seen:
            continue
        seen.add(space.key(config))
        out.append(config)
    return out


def _project(
    space: SearchSpace, steps: int, topk: int, position: float
) -> dict[str, Any] | None:
    knobs = space.params
    if STEPS not in knobs:
        return None
    # The space's own (fraction) coordinates, whatever encoding a subclass shows the sampler.
    study: dict[str, Any] = {}
    for name, dist in SearchSpace.distributions(space).items():
        if name.startswith(STEPS):
            study[name] = min(max(steps, dist.low), dist.high)  # type: ignore[attr-defined]
        elif name.startswith(TOPK):
            study[name] = topk
        elif name.startswith(DRAFT):
            study[name] = position
        else:
            return None  # a knob this batch knows nothing about: let the sampler start
    try:
        config = SearchSpace.decode(space, study)
    except (KeyError, ValueError, IndexError):
        return None
    return config if space.check(config) is None else None
