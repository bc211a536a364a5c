"""When the requests of an open-loop level arrive: Poisson at a rate, or a trace's shape.

Every trial of a study gets the same arrival times at a given rate (the seed and the
rate fix them), so two configs differ only in how they serve the same traffic.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Trace:
    """Arrival times recorded somewhere else, replayed at any mean rate (bursts kept)."""

    name: str
    offsets: tuple[float, ...]
    """Seconds after the first arrival, ascending, starting at 0."""

    @property
    def span_s(self) -> float:
        return self.offsets[-1]

    @property
    def mean_rate(self) -> float:
        return (len(self.offsets) - 1) / self.span_s


class TraceError(ValueError):
    """A trace file that cannot be read; the message names the file and the line."""


def load_trace(path: str | Path) -> Trace:
    """Arrival times, one per line: a number of seconds, or a JSON object with
    `arrival_s` (seconds) or `timestamp` (milliseconds, as Mooncake's traces write it).
    Lines may be in any order and start anywhere; blank lines and `#` comments are skipped."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TraceError(f"{p}: cannot read the trace: {exc.strerror or exc}") from None
    times: list[float] = []
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        t = _arrival(line)
        if t is None:
            raise TraceError(
                f"{p}:{n}: not an arrival time (a number of seconds, or JSON with arrival_s "
                f"or timestamp in ms): {line[:80]!r}"
            )
        times.append(t)
    times.sort()
    if len(times) < 2 or times[-1] <= times[0]:
        raise TraceError(f"{p}: a trace needs at least two distinct arrival times")
    return Trace(p.name, tuple(t - times[0] for t in times))


def _arrival(line: str) -> float | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if isinstance(value, dict):
        if _number(value.get("arrival_s")):
            return float(value["arrival_s"])
        if _number(value.get("timestamp")):
            return float(value["timestamp"]) / 1000.0
        return None
    return float(value) if _number(value) else None


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e15


def arrival_times(
    rate: float, duration_s: float, *, seed: int = 0, trace: Trace | None = None
) -> list[float]:
    """Offsets (seconds) of the requests arriving within `duration_s` at a mean `rate`/s.

    Poisson: exponential gaps from a generator seeded by (seed, rate). A trace: its own
    gaps, time-scaled so that its mean rate is `rate`, repeated when it is shorter.
    """
    if rate <= 0 or duration_s <= 0:
        raise ValueError(f"need a positive rate and duration, got {rate} and {duration_s}")
    if trace is None:
        rng = random.Random(f"{seed}:{rate!r}")
        out: list[float] = []
        t = rng.expovariate(rate)
        while t < duration_s:
            out.append(t)
            t += rng.expovariate(rate)
        return out or [0.0]
    scale = trace.mean_rate / rate
    period = (trace.span_s + 1.0 / trace.mean_rate) * scale  # one gap joins the repeats
    out, start = [], 0.0
    while start < duration_s:
        out.extend(t for o in trace.offsets if (t := start + o * scale) < duration_s)
        start += period
    return out
