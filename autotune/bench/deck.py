"""Prompts drawn without replacement across everything one trial sends.

A server that saw a prompt before does not serve it fresh: prefix caches skip its
prefill, and speculators that learn from earlier outputs (llama.cpp's ngram-mod and
ngram caches, SGLang's NGRAM) replay the answer they saw (ngram-mod went from 74 to
114 tok/s on a second pass over the same prompts). So the warm-up and every level of
a trial draw from one deck in turn: no measured request repeats a prompt the server
already had, until the workload runs out. Then the deck starts over with a prefix that
differs per pass (no prefix-cache hit), and the level counts the repeats and says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.bench.protocol import Prompt


class PromptDeck:
    """The workload's prompts in order, each once per pass."""

    def __init__(self, prompts: Sequence[Prompt]) -> None:
        if not prompts:
            raise ValueError("a deck needs at least one prompt")
        self._prompts = tuple(prompts)
        self.drawn = 0
        """Prompts drawn so far (warm-ups included)."""

    def __len__(self) -> int:
        return len(self._prompts)

    def draw(self) -> tuple[Prompt, bool]:
        """The next prompt, and whether this trial sent it (or its text) before."""
        n = len(self._prompts)
        again, i = divmod(self.drawn, n)
        self.drawn += 1
        prompt = self._prompts[i]
        return (varied(prompt, again + 1), True) if again else (prompt, False)


def varied(prompt: Prompt, n: int) -> Prompt:
    """`prompt` as the n-th pass sends it: a numbered first line, so its token prefix
    differs from every other pass's (a cache of prefixes shares nothing past it)."""
    tag = f"(Request set {n}.)\n"
    if isinstance(prompt, str):
        return tag + prompt
    first, *rest = prompt
    return ({**first, "content": tag + first["content"]}, *rest)
