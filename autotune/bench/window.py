"""The steady-state measurement window and the tokens that fall inside it.

A closed loop of C workers only loads the server with C requests once every
worker has its request past prefill, and loads it with fewer again as soon as
the first worker runs out of work after the stop. So the window is

    start = the moment the last worker received its first token
    end   = the moment the first worker finished its last request after the stop

and inside it every one of the C slots is busy (bar the microseconds between a
response's end and the next request). Ramp-up and drain fall outside. Each edge then
moves to the end of the delivery burst it falls in (`burst_end`), so that a server
step is either wholly inside the window or wholly outside it.

Tokens are placed in time by the arrival of the chunk that carried them, with
each request's chunk counts already scaled to the server's own total
(`RequestRecord.finalize`). A chunk counts if it arrived in (start, end]; the
chunk that opens the window carries prefill output and stays out.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from autotune.bench.record import RequestRecord
from autotune.bench.stats import batch_means_ci

CI_BATCHES = 20
"""Batches per window for the batch-means interval (10-30 is the usual advice)."""


def tokens_in(records: Iterable[RequestRecord], start: float, end: float) -> int:
    """Output tokens whose chunks arrived inside (start, end]."""
    total = 0
    for rec in records:
        if not rec.ok or not rec.times or rec.times[-1] <= start or rec.times[0] > end:
            continue
        for t, n in zip(rec.times, rec.counts, strict=True):
            if start < t <= end:
                total += n
    return total


#: Chunks closer than this belong to one delivery burst: one server step reaching all streams
#: (the client reads one in ~0.1 ms; a step of a batched server takes tens of ms).
BURST_GAP_S = 0.002
#: A window edge moves at most this far to the end of its burst (back-to-back steps have none).
BURST_CAP_S = 0.02


def burst_end(times: Sequence[float], t: float) -> float:
    """The last chunk time of the delivery burst that `t` (a chunk time) belongs to.

    A window edge set at a chunk's arrival cuts the server step that produced it: the
    other streams' chunks of that step, read just after it, would fall outside, though the
    server produced them before the edge. At the end of a window that step is a full
    decode step, at its start often a prefill of one request, so the cut does not cancel:
    the client read 0.3-0.9 % below the server's own counter at 64 streams before edges
    moved to the end of their burst (docs/benchmark.md, "How much the client can measure").
    """
    i = bisect.bisect_right(times, t)
    edge = t
    while i < len(times) and times[i] - edge < BURST_GAP_S and times[i] - t <= BURST_CAP_S:
        edge = times[i]
        i += 1
    return edge


def input_tokens_in(records: Iterable[RequestRecord], start: float, end: float) -> int:
    """Prompt tokens of requests whose prefill completed (first token) inside the window."""
    return sum(
        rec.prompt_tokens or 0
        for rec in records
        if rec.ok and rec.first_token_at is not None and start < rec.first_token_at <= end
    )


def batch_throughputs(
    records: Iterable[RequestRecord], start: float, end: float, batches: int = CI_BATCHES
) -> list[float]:
    """Output tokens/s in `batches` equal stretches of the window."""
    width = (end - start) / batches
    if width <= 0:
        return []
    sums = [0.0] * batches
    for rec in records:
        if not rec.ok or not rec.times or rec.times[-1] <= start or rec.times[0] > end:
            continue
        for t, n in zip(rec.times, rec.counts, strict=True):
            if start < t <= end and n:
                i = int((t - start) / width)
                sums[i if i < batches else batches - 1] += n
    return [s / width for s in sums]


def throughput_ci(
    records: Iterable[RequestRecord], start: float, end: float, batches: int = CI_BATCHES
) -> tuple[float, float, float]:
    """(mean tok/s, 95 % half-width in tok/s, lag-1 autocorrelation) over the window."""
    return batch_means_ci(batch_throughputs(records, start, end, batches))


class LiveRate:
    """Running token arrivals in fine time bins, for progress and the stopping rule.

    Fed by the monitor from the provisional chunk weights of requests still in
    flight, so it never touches the streaming hot path. Its scale is only
    approximately tokens (hence `scale`), but the relative CI width it gives
    does not depend on the scale.
    """

    BIN_S = 0.05

    def __init__(self, origin: float) -> None:
        self.origin = origin
        self.bins: list[float] = []
        self._done: dict[int, int] = {}  # id(record) -> chunks already binned
        self.weight_total = 0.0
        self.token_total = 0.0

    def feed(self, rec: RequestRecord) -> None:
        """Bin the chunks of `rec` that arrived since its last feed."""
        key = id(rec)
        first = self._done.get(key, 0)
        times, weights = rec.times, rec.weights
        n = len(times)
        if n <= first:
            return
        bins, origin, inv = self.bins, self.origin, 1.0 / self.BIN_S
        for j in range(first, n):
            i = int((times[j] - origin) * inv)
            if i >= len(bins):
                bins.extend([0.0] * (i + 1 - len(bins)))
            bins[i] += weights[j]
        self._done[key] = n

    def finish(self, rec: RequestRecord) -> None:
        """`rec` has ended: bin its last chunks and learn tokens per unit of weight."""
        self.feed(rec)
        self._done.pop(id(rec), None)
        if rec.ok and rec.counts:
            self.weight_total += sum(rec.weights[: len(rec.counts)])
            self.token_total += sum(rec.counts)

    @property
    def scale(self) -> float:
        return self.token_total / self.weight_total if self.weight_total > 0 else 1.0

    def window_batches(self, start: float, end: float, batches: int = CI_BATCHES) -> list[float]:
        """Weight per second in `batches` stretches of (start, end], from whole bins."""
        lo = int((start - self.origin) / self.BIN_S) + 1
        hi = int((end - self.origin) / self.BIN_S)
        per = (hi - lo) // batches
        if per < 1:
            return []
        out = []
        for b in range(batches):
            seg = self.bins[lo + b * per : lo + (b + 1) * per]
            out.append(sum(seg) / (per * self.BIN_S))
        return out

    def rate(self, start: float, end: float) -> float:
        """Approximate output tokens/s over (start, end]."""
        lo = int((start - self.origin) / self.BIN_S) + 1
        hi = int((end - self.origin) / self.BIN_S)
        if hi <= lo:
            return 0.0
        return sum(self.bins[lo:hi]) / ((hi - lo) * self.BIN_S) * self.scale
