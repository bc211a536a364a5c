"""One streamed request as measured: chunk arrival times, text, the server's token count.

With speculative decoding one SSE chunk carries several tokens, so a chunk is
never a token here. Each chunk gets a provisional weight while it streams (the
exact token delta when the server sends one, else a cheap length estimate);
once the server's total is known, `finalize` turns the weights into integer
token counts that sum exactly to that total.
"""

from __future__ import annotations

import math

CHARS_PER_TOKEN = 4.0
"""Rough characters per token of English text and code, for the provisional weights."""


def estimate_tokens(text: str) -> float:
    """Cheap token estimate of a chunk's text: every non-empty chunk holds at least one."""
    w = len(text) / CHARS_PER_TOKEN
    return w if w > 1.0 else 1.0


def recount_tokens(text: str, token_chunks: int) -> int:
    """Output length of a request whose server sent no count.

    Each chunk with text holds at least one token, so the chunk count is a hard
    lower bound; the character estimate covers chunks that carried several.
    """
    return max(token_chunks, round(len(text) / CHARS_PER_TOKEN))


def apportion(weights: list[float], total: int) -> list[int]:
    """Split `total` tokens over chunks in proportion to `weights`, in integers.

    Every chunk with a positive weight gets at least one token when the total
    allows it (a chunk with text carried a token); the rest goes by largest
    remainder, so the counts sum exactly to `total`.
    """
    n = len(weights)
    if n == 0 or total <= 0:
        return [0] * n
    positive = [i for i, w in enumerate(weights) if w > 0]
    base = [0] * n
    if total >= len(positive) and positive:
        for i in positive:
            base[i] = 1
        rest = total - len(positive)
        share = [max(w - 1.0, 0.0) for w in weights]
        if sum(share) <= 0:
            share = [max(w, 0.0) for w in weights]
    else:
        rest = total
        share = [max(w, 0.0) for w in weights]
    s = sum(share)
    if s <= 0:
        # No usable weights (chunks without text): spread evenly.
        share = [1.0] * n
        s = float(n)
    if rest:
        exact = [rest * x / s for x in share]
        floors = [math.floor(x) for x in exact]
        left = rest - sum(floors)
        order = sorted(range(n), key=lambda i: exact[i] - floors[i], reverse=True)
        for i in order[:left]:
            floors[i] += 1
        base = [b + f for b, f in zip(base, floors, strict=True)]
    return base


class RequestRecord:
    """Everything measured about one request. Times are `time.perf_counter()` seconds."""

    __slots__ = (
        "accept_histogram",
        "completion_tokens",
        "counts",
        "done",
        "draft_accepted",
        "draft_tokens",
        "end",
        "error",
        "exact",
        "finish_reason",
        "first_token_at",
        "max_tokens",
        "parts",
        "prompt_tokens",
        "seq",
        "spec_verify_ct",
        "start",
        "times",
        "warmup",
        "weights",
        "worker",
    )

    def __init__(self, worker: int, seq: int, max_tokens: int, warmup: bool = False) -> None:
        self.worker = worker
        self.seq = seq
        self.max_tokens = max_tokens
        self.warmup = warmup
        self.start = 0.0
        self.first_token_at: float | None = None
        self.end = 0.0
        self.times: list[float] = []
        self.weights: list[float] = []
        self.counts: list[int] = []
        self.parts: list[str] = []
        self.exact = False
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.spec_verify_ct: int | None = None
        self.accept_histogram: list[int] | None = None
        """Verify steps that accepted exactly 0, 1, 2, ... drafts (SGLang's native
        `meta_info.spec_correct_drafts_histogram`)."""
        self.draft_tokens: int | None = None
        """Draft tokens the server proposed for this request (llama.cpp `timings.draft_n`)."""
        self.draft_accepted: int | None = None
        self.finish_reason: str | None = None
        self.done = False
        self.error: str | None = None

    # -- while streaming (hot path) -------------------------------------------------

    def add_text(self, t: float, text: str) -> None:
        """A chunk with text arrived at `t`; its token count is estimated for now."""
        if self.first_token_at is None:
            self.first_token_at = t
        self.times.append(t)
        w = len(text) / CHARS_PER_TOKEN
        self.weights.append(w if w > 1.0 else 1.0)
        self.parts.append(text)

    def add_tokens(self, t: float, tokens: int, text: str) -> None:
        """A chunk whose exact token delta the server stated (native `meta_info`)."""
        self.exact = True
        if self.first_token_at is None:
            self.first_token_at = t
        self.times.append(t)
        self.weights.append(float(tokens))
        if text:
            self.parts.append(text)

    # -- after the stream ------------------------------------------------------------

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def output_tokens(self) -> int:
        return sum(self.counts)

    def finalize(self, total: int | None) -> None:
        """Fix per-chunk token counts so they sum to the server's `total`.

        `None` means the server gave no count: re-count from the text.
        """
        if total is None:
            total = recount_tokens(self.text, len(self.times))
        if self.exact and sum(self.weights) == total:
            self.counts = [int(w) for w in self.weights]
        elif not self.times and total > 0:
            # Tokens without any text chunk (all special tokens): they arrived by the end.
            self.times.append(self.end)
            self.weights.append(float(total))
            self.counts = [total]
            if self.first_token_at is None:
                self.first_token_at = self.end
        else:
            self.counts = apportion(self.weights, total)

    def ttft(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.start

    def itl_samples(self) -> list[tuple[float, int]]:
        """Inter-token latencies as (seconds, multiplicity).

        The gap before a chunk of n tokens counts as n latencies of gap/n: one
        latency per chunk would report the speculation step time, n times too long.
        Tokens of the first chunk arrive with the first token and have no latency.
        """
        out: list[tuple[float, int]] = []
        prev: float | None = None
        for t, n in zip(self.times, self.counts, strict=True):
            if n <= 0:
                continue
            if prev is not None:
                out.append(((t - prev) / n, n))
            prev = t
        return out

    def tpot(self) -> float | None:
        """Mean time per output token after the first."""
        total = self.output_tokens
        if total < 2 or self.first_token_at is None:
            return None
        last = max((t for t, n in zip(self.times, self.counts, strict=True) if n > 0))
        return (last - self.first_token_at) / (total - 1)

    def e2e(self) -> float:
        return self.end - self.start
