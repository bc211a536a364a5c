"""A first batch of informative configs, from what is known about the engine.

Run after the baseline instead of random startup trials. Engine facts behind it:
- SGLang's documented settings: its defaults (steps 5, topk 4, draft 8), the
  EAGLE-3 example (5, 8, 32), and the auto choice for MTP models (3, 1, 4) --
  which is what most units already run, i.e. the baseline;
- at high concurrency verify work is paid per request, so short chains
  (topk 1) win; at one request spare compute makes wide trees pay; every
  knob's effect is unimodal, so a short and a long chain next to a mid and a
  big tree bracket the optimum of either objective for the sampler to refine.
Each point is projected onto the space through its own encoding: a draft
count above the tree's capacity (steps * topk + 1) is clamped to it, a topk-1
space keeps only the steps, and duplicates (of the baseline too) are dropped.
"""

from __future__ import annotations

from typing import Any

from autotune.space import SearchSpace

STEPS, TOPK, DRAFT = (
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)

#: (steps, topk, draft tokens), in the order they run after the baseline.
BATCHES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "docs": ((5, 4, 8), (5, 8, 32), (5, 1, 6)),
    "span": ((5, 1, 6), (4, 4, 12), (6, 8, 40), (1, 1, 2)),
}


def informative_configs(
    space: SearchSpace, batch: str, skip: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The batch's configs as this space runs them; duplicates and `skip` (the baseline) dropped."""
    if not {STEPS, TOPK, DRAFT} <= set(space.params):
        return []  # a space of other knobs: the sampler starts on its own
    seen = {space.key(c) for c in skip or []}
    out = []
    for steps, topk, draft in BATCHES[batch]:
        wanted = {STEPS: steps, TOPK: topk, DRAFT: draft}
        try:
            config = space.decode(space.encode(wanted))
        except (KeyError, ValueError):
            continue
        if space.check(config) is not None or space.key(config) in seen:
            continue
        seen.add(space.key(config))
        out.append(config)
    return out
