"""How SGLang builds an EAGLE draft tree, and what a verify step of that tree accepts.

An engine fact, read from the 0.5.23 wheel: `srt/speculative/spec_utils.py` lines 438-452
(`_select_top_k_tokens_later`: `expand_scores = scores.unsqueeze(2) * topk_p`, then
`fast_topk(expand_scores.flatten(1), topk)`) and `srt/speculative/eagle_utils.py` lines
100-110 (`organize_draft_results`: `torch.topk(score_list, num_draft_token - 1)` over every
expanded node). `steps` draft forward passes. The
first proposes the root's `topk` likeliest tokens. Each later pass expands every beam by
its `topk` likeliest tokens and keeps, as the next beams, the `topk` expansions with the
highest cumulative draft probability. Of every node expanded, the `num_draft_tokens - 1`
with the highest cumulative probability, and the root, are the tree the target verifies.

What the engine does not say is the draft's distribution over its candidates. Each caller
brings its own: the simulator's (`sim/tree.py`) and the performance model's
(`search/perf/acceptance.py`). Both rank a calibrated draft's candidates by the chance that
the target's token is that candidate. Then a node's cumulative probability is the chance
that the target accepts the path to it, and the chance of accepting at least j drafts is
the sum over the tree's nodes at depth j.
"""

from __future__ import annotations

from collections.abc import Sequence


def accept_dist(ranks: Sequence[Sequence[float]], topk: int, draft: int) -> tuple[float, ...]:
    """P(tokens emitted per verify step = 1, 2, ...) of the tree SGLang builds.

    `ranks[j][r]`: the chance that the target's token at depth j (given the path to it was
    accepted) is the draft's rank r + 1 candidate; one row per draft pass (`steps`), at
    least `topk` entries each. `draft`: the tokens verified, the root included."""
    budget = draft - 1
    if not ranks or budget <= 0:
        return (1.0,)
    topk = max(1, topk)
    # (cumulative probability, depth), in the order SGLang concatenates its score lists:
    # on a tie the earlier node, a parent before its children, is taken first.
    nodes = [(p, 0) for p in ranks[0][:topk]]
    beams = [p for p, _ in nodes]
    for depth in range(1, len(ranks)):
        expanded = [b * p for b in beams for p in ranks[depth][:topk]]
        nodes += [(x, depth) for x in expanded]
        beams = sorted(expanded, reverse=True)[:topk]
    chosen = sorted(range(len(nodes)), key=lambda i: -nodes[i][0])[:budget]
    reach = [0.0] * len(ranks)
    for i in chosen:
        score, depth = nodes[i]
        reach[depth] += score
    while len(reach) > 1 and reach[-1] <= 0.0:
        reach.pop()
    dist = [1.0 - reach[0]]
    dist += [reach[j] - reach[j + 1] for j in range(len(reach) - 1)]
    dist.append(reach[-1])
    return tuple(max(0.0, p) for p in dist)
