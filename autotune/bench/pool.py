"""Two measurements of one level pooled into one, with an honest confidence interval.

A level that reached `max_duration` without meeting its confidence target is
measured once more (a stalled host, a noisy neighbour or a GC pause rarely hits
both runs). The pooled rate is all tokens over all window time; its interval
is the larger of the two runs' intervals combined and half the gap between the
two rates, so two runs that disagree are never reported as certain.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["pool_levels"]

_SUMMED = (
    "requests",
    "errors",
    "output_tokens",
    "input_tokens",
    "window_requests",
    "chunks",
    "sent_output_tokens",
    "draft_tokens",
    "draft_accepted",
    "server_output_tokens",
    "server_draft_tokens",
    "server_accepted_tokens",
    "server_drafts",
)


def pool_levels(a: dict[str, Any], b: dict[str, Any], ci_width: float | None) -> dict[str, Any]:
    """`a` and `b` (level dicts, `LevelResult.to_dict()` shape) as one level.

    Latency percentiles and everything not pooled are `b`'s, the later run.
    """
    wa, wb = float(a["window_s"]), float(b["window_s"])
    ra, rb = float(a["output_throughput"]), float(b["output_throughput"])
    window = wa + wb
    rate = (a["output_tokens"] + b["output_tokens"]) / window if window > 0 else 0.0
    hwa, hwb = _abs_halfwidth(a), _abs_halfwidth(b)
    within = math.sqrt((wa * hwa) ** 2 + (wb * hwb) ** 2) / window if window > 0 else math.inf
    halfwidth = max(within, abs(ra - rb) / 2)
    rel = halfwidth / rate if rate > 0 else math.inf
    out = dict(b)
    for key in _SUMMED:
        if a.get(key) is not None and b.get(key) is not None:
            out[key] = a[key] + b[key]
    out["window_s"] = window
    out["output_throughput"] = rate
    out["total_throughput"] = (out["output_tokens"] + out["input_tokens"]) / window if window else 0
    out["ci_halfwidth"] = rel if math.isfinite(rel) else None
    out["ci_halfwidth_tok_s"] = halfwidth if math.isfinite(halfwidth) else None
    out["ci_target_met"] = ci_width is not None and rel <= ci_width
    out["attempt_throughputs"] = [round(ra, 2), round(rb, 2)]
    if a.get("accept_length") and b.get("accept_length"):
        out["accept_length"] = (a["accept_length"] + b["accept_length"]) / 2
    if out.get("draft_tokens"):
        out["draft_acceptance"] = out["draft_accepted"] / out["draft_tokens"]
    if out.get("server_draft_tokens"):
        out["server_draft_acceptance"] = out["server_accepted_tokens"] / out["server_draft_tokens"]
    if out.get("server_drafts"):
        out["server_accept_length"] = 1 + out["server_accepted_tokens"] / out["server_drafts"]
    out["notes"] = [
        *(a.get("notes") or []),
        *(b.get("notes") or []),
        f"measured twice ({ra:.1f} and {rb:.1f} tok/s): the first run missed its "
        "confidence target; pooled over both windows",
    ]
    return out


def _abs_halfwidth(level: dict[str, Any]) -> float:
    hw = level.get("ci_halfwidth_tok_s")
    return float(hw) if isinstance(hw, (int, float)) and math.isfinite(hw) else math.inf
