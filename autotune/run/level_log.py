"""How a level shows while it runs: the status line on a terminal, a log line every 2 s
under systemd, and the figures its lines quote (a `±` half-width, a constraint's interval)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from autotune import log as alog
from autotune.log import get
from autotune.search import objective

log = get("autotune.run.trial")

PROGRESS_KEYS = ("phase", "elapsed_s", "window_s", "requests", "errors", "tok_s", "ci")


def logger(i: int, n: int, c: int, time_scale: float = 1.0) -> Callable[[dict[str, Any]], None]:
    """The level's progress: on the status line (a terminal), else a log line every 2 s
    (tok/s in real-server units, a rehearsal's speed-up taken out)."""
    last = [0.0]
    alog.progress(level=f"level {i}/{n} (c={c})", tok_s=None)

    def note(p: dict[str, Any]) -> None:
        tok_s = p.get("tok_s")
        if isinstance(tok_s, (int, float)):
            p = {**p, "tok_s": round(tok_s / time_scale, 1)}
            tok_s = p["tok_s"]
        phase = p.get("phase")
        alog.progress(
            level=f"level {i}/{n} (c={c}{f', {phase}' if phase else ''})",
            tok_s=f"{tok_s:.0f} tok/s" if isinstance(tok_s, (int, float)) else None,
        )
        now = time.monotonic()
        if not alog.live() and now - last[0] >= 2.0:
            last[0] = now
            shown = {k: v for k, v in p.items() if k in PROGRESS_KEYS and v is not None}
            log.info("benchmarking", level=f"{i}/{n}", concurrency=c, **shown)

    return note


def interval_text(j: objective.Judged) -> str:
    if j.low is None or j.high is None:
        return f"{j.value:.3g} (limit {j.limit:g})"
    return f"{j.value:.3g} in [{j.low:.3g}, {j.high:.3g}] (limit {j.limit:g})"


def pm(share: float | None, beside: float | None = None) -> str:
    """`±2.1%`; with the digits that tell it from `beside` when one decimal would not (a
    half-width of 2.04 % missed a ±2.0 % target: `±2.04%`)."""
    if share is None:
        return "±?"
    digits = 1
    while beside is not None and digits < 4 and f"{share:.{digits}%}" == f"{beside:.{digits}%}":
        digits += 1
    return f"±{share:.{digits}%}"
