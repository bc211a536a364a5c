"""SGLang's own sweep order (`bench_speculative.py`), mapped onto a search space.

SGLang walks steps (0, 1, 3, 5, 7) x topk (0, 1, 2, 4, 8) x draft tokens
(0, 2, 4, 8, 16, 32), keeps `steps * topk + 1 >= draft`, and runs the all-zero
entry as "no speculation". It repeats that grid for every batch size it is
given (1, 2, 4, 8, 16 by default); autotune measures every concurrency level in
one deployment, so one pass of the grid is the comparable cost.
"""

from __future__ import annotations

import itertools
from typing import Any

from autotune.space import SearchSpace

STEPS = (0, 1, 3, 5, 7)
TOPK = (0, 1, 2, 4, 8)
DRAFT = (0, 2, 4, 8, 16, 32)
BATCH_SIZES = (1, 2, 4, 8, 16)


def sglang_grid() -> list[tuple[int, int, int]]:
    """(steps, topk, draft) in the order SGLang runs them, for one batch size."""
    out = []
    for steps, topk, draft in itertools.product(STEPS, TOPK, DRAFT):
        if steps * topk + 1 < draft:
            continue
        zeros = steps == 0 or topk == 0 or draft == 0
        if zeros and steps + topk + draft != 0:
            continue
        out.append((steps, topk, draft))
    return out


def grid_on_space(space: SearchSpace) -> list[dict[str, Any]]:
    """The grid's distinct configs as the space runs them, in grid order.

    Each entry goes through the space's own encoding (so a fixed knob takes
    the space's value and a rule applies, e.g. topk 1 -> draft = steps + 1);
    entries the space cannot express (no speculation) are dropped.
    """
    seen: set[tuple[tuple[str, Any], ...]] = set()
    out = []
    for steps, topk, draft in sglang_grid():
        if steps == 0:
            continue
        wanted = {
            "speculative_num_steps": steps,
            "speculative_eagle_topk": topk,
            "speculative_num_draft_tokens": draft,
        }
        config = space.decode(space.encode(wanted))
        if space.check(config) is not None or space.key(config) in seen:
            continue
        seen.add(space.key(config))
        out.append(config)
    return out
