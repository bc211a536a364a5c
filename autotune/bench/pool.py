"""Two measurements of one level pooled into one, with an honest confidence interval.

A level that reached `max_duration` without meeting its confidence target is
measured once more (a stalled host, a noisy neighbour or a GC pause rarely hits
both runs). The pooled rate is all tokens over all window time; its interval
is the larger of the two runs' intervals combined and half the gap between the
two rates, so two runs that disagree are never reported as certain.
"""

from __future__ import annotations

import dataclasses
import math

from autotune.bench.result import LevelResult

__all__ = ["pool_levels"]

_SUMMED = (
    "requests",
    "errors",
    "output_tokens",
    "input_tokens",
    "window_requests",
    "chunks",
    "sent_output_tokens",
    "prompts_repeated",
    "draft_tokens",
    "draft_accepted",
)


def pool_levels(
    a: LevelResult, b: LevelResult, ci_width: float | None, why: str | None = None
) -> LevelResult:
    """`a` and `b` as one level.

    TTFT and ITL percentiles, the degenerate share and their intervals are over both runs'
    requests; the other latencies and everything not pooled are `b`'s, the later run.
    """
    wa, wb = a.window_s, b.window_s
    ra, rb = a.output_throughput, b.output_throughput
    window = wa + wb
    rate = (a.output_tokens + b.output_tokens) / window if window > 0 else 0.0
    hwa, hwb = _abs_halfwidth(a), _abs_halfwidth(b)
    within = math.sqrt((wa * hwa) ** 2 + (wb * hwb) ** 2) / window if window > 0 else math.inf
    halfwidth = max(within, abs(ra - rb) / 2)
    rel = halfwidth / rate if rate > 0 else math.inf
    summed = {}
    for key in _SUMMED:
        x, y = getattr(a, key), getattr(b, key)
        if x is not None and y is not None:
            summed[key] = x + y
    output = summed.get("output_tokens", b.output_tokens)
    prompt = summed.get("input_tokens", b.input_tokens)
    server = a.server.plus(b.server) if a.server and b.server else b.server
    accept = b.accept_length
    if a.accept_length and b.accept_length:
        accept = (a.accept_length + b.accept_length) / 2
    # The constrained statistics from both runs' requests, with their intervals.
    judged: dict[str, object] = {}
    if a.samples is not None and b.samples is not None:
        samples = a.samples.plus(b.samples)
        judged = {**samples.latencies_ms(), "samples": samples, "intervals": samples.intervals()}
        if samples.degenerate:
            judged["degenerate_share"] = sum(samples.degenerate) / len(samples.degenerate)
    return dataclasses.replace(
        b,
        **summed,
        **judged,  # type: ignore[arg-type]
        window_s=window,
        output_throughput=rate,
        total_throughput=(output + prompt) / window if window else 0.0,
        ci_halfwidth=rel,
        ci_halfwidth_tok_s=halfwidth,
        ci_target_met=ci_width is not None and rel <= ci_width,
        server=server,
        attempt_throughputs=(round(ra, 2), round(rb, 2)),
        accept_length=accept,
        accept_histogram=_added(a.accept_histogram, b.accept_histogram),
        notes=(
            *a.notes,
            *b.notes,
            f"measured twice ({ra:.1f} and {rb:.1f} tok/s): "
            + (why or "the first run missed its confidence target")
            + "; pooled over both windows",
        ),
    )


def _abs_halfwidth(level: LevelResult) -> float:
    hw = level.ci_halfwidth_tok_s
    return float(hw) if isinstance(hw, (int, float)) and math.isfinite(hw) else math.inf


def _added(a: tuple[int, ...] | None, b: tuple[int, ...] | None) -> tuple[int, ...] | None:
    if a is None or b is None:
        return a or b
    n = max(len(a), len(b))
    return tuple((a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(n))
