"""The changing-load phase: a closed loop whose client count steps across the levels and back.

Fixed levels find the best config per load; a config, or an exported per-load schedule,
can still break where the load changes: a per-batch-size schedule that collapses at its
switch point, an adaptive controller whose tier flaps, a stream that stalls while the
server reconfigures. Timeline of the phase (each segment `segment_s` long):

    c=1 ──► c=16 ──► c=64 ──► c=16 ──► c=1 ──► drain

Stepping up starts workers; stepping down lets the extra workers finish the request they
are on. Throughput and latency are binned along the way; the caller adds what the server
logged (tier switches) and judges the phase against the fixed levels (`judge`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from itertools import pairwise
from time import perf_counter
from typing import Any

from autotune.bench.client import Streamer, open_streamer
from autotune.bench.deck import PromptDeck
from autotune.bench.record import RequestRecord
from autotune.bench.runner import ProgressFn
from autotune.bench.stats import percentiles
from autotune.bench.workload import Workload

#: A stream silent this long (server seconds) between two chunks of one response stalled.
STALL_S = 5.0
#: Tier switches per minute at a steady load above which a controller flaps (SGLang's
#: shipped config was seen switching several times a second).
FLAP_PER_MIN = 6.0
#: The first share of a segment is the load changing; steady figures skip it.
SETTLE_SHARE = 0.3
#: A segment serving less than this share of the fixed level's throughput broke there.
BROKE_BELOW = 0.8
BINS_PER_SEGMENT = 10


def ramp(levels: tuple[int, ...]) -> tuple[int, ...]:
    """The levels up and back down: (1, 16, 64) -> (1, 16, 64, 16, 1)."""
    up = tuple(sorted(set(levels)))
    return up + tuple(reversed(up[:-1]))


@dataclass(frozen=True)
class TierSwitch:
    at_s: float
    """Server seconds after the phase started."""
    before: int
    after: int


@dataclass(frozen=True)
class Segment:
    concurrency: int
    start_s: float
    end_s: float
    output_throughput: float
    """Over the segment's steady part (after SETTLE_SHARE of it)."""
    requests: int
    ttft_ms_p99: float | None
    itl_ms_p99: float | None


@dataclass(frozen=True)
class PhaseResult:
    levels: tuple[int, ...]
    segment_s: float
    bins: tuple[dict[str, Any], ...]
    """Per bin: t_s (its start), concurrency, tok_s, ttft_ms_p50 of the requests whose first
    token came in it, itl_ms_p99 of the token gaps in it."""
    segments: tuple[Segment, ...]
    requests: int
    errors: int
    unfinished: int
    """Still streaming when the drain ended (cancelled)."""
    stalls: int
    """Responses with a silence longer than STALL_S between two of their chunks."""
    longest_gap_s: float
    output_throughput: float
    """Over the whole phase."""
    switches: tuple[TierSwitch, ...] = ()
    switches_per_min_steady: float | None = None
    held_up: bool = True
    problems: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["switches"] = [[s.at_s, s.before, s.after] for s in self.switches]
        return _rounded(out)


@dataclass(frozen=True)
class PhaseSettings:
    levels: tuple[int, ...]
    segment_s: float = 10.0
    time_scale: float = 1.0
    request_timeout_s: float = 300.0
    stall_s: float = STALL_S
    drain_s: float = 60.0
    """Longest wait (server seconds) for the last requests after the phase."""


async def run_phase(
    base_url: str,
    model: str | None,
    workload: Workload,
    settings: PhaseSettings,
    *,
    api_key: str | None = None,
    endpoint: str = "chat",
    deck: PromptDeck | None = None,
    on_progress: ProgressFn | None = None,
) -> PhaseResult:
    deck = deck if deck is not None else PromptDeck(workload.prompts)
    async with open_streamer(
        base_url,
        max(settings.levels),
        workload,
        endpoint=endpoint,
        model=model,
        api_key=api_key,
        timeout_s=settings.request_timeout_s / settings.time_scale,
    ) as streamer:
        return await _Phase(streamer, workload, settings, deck, on_progress).run()


class _Phase:
    def __init__(
        self,
        streamer: Streamer,
        workload: Workload,
        settings: PhaseSettings,
        deck: PromptDeck,
        on_progress: ProgressFn | None,
    ) -> None:
        self.streamer = streamer
        self.workload = workload
        self.s = settings
        self.deck = deck
        self.on_progress = on_progress
        self.target = 0
        self.stopping = False
        self.changed = asyncio.Event()
        self.records: list[RequestRecord] = []

    async def run(self) -> PhaseResult:
        k = self.s.time_scale
        seg = self.s.segment_s / k
        self.t0 = perf_counter()
        workers = [asyncio.create_task(self._worker(i)) for i in range(max(self.s.levels))]
        try:
            for n, c in enumerate(self.s.levels):
                self._set(c)
                self._progress(n, c)
                await asyncio.sleep(self.t0 + (n + 1) * seg - perf_counter())
            self.stopping = True
            self._set(0)
            _, pending = await asyncio.wait(workers, timeout=self.s.drain_s / k)
            self.drained_at = perf_counter()
            for task in pending:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        finally:
            for task in workers:
                task.cancel()
        return self._result()

    def _set(self, c: int) -> None:
        self.target = c
        self.changed.set()
        self.changed = asyncio.Event()

    def _progress(self, n: int, c: int) -> None:
        if self.on_progress is not None:
            self.on_progress({"phase": "changing load", "segment": n + 1,
                              "of": len(self.s.levels), "concurrency": c})  # fmt: skip

    async def _worker(self, i: int) -> None:
        while not self.stopping:
            if i >= self.target:
                await self.changed.wait()
                continue
            rec = RequestRecord(i, len(self.records), self.workload.max_tokens)
            self.records.append(rec)
            prompt, _ = self.deck.draw()
            try:
                await self.streamer.send(rec, prompt)
            except Exception as exc:  # a broken request is a failed one, not a lost worker
                rec.error, rec.end = f"{type(exc).__name__}: {exc}", perf_counter()
            if rec.ok:
                rec.finalize(rec.completion_tokens)

    def _result(self) -> PhaseResult:
        k, s = self.s.time_scale, self.s
        t0 = self.t0
        ended = [r for r in self.records if r.end]
        ok = [r for r in ended if r.ok]
        # Still streaming when the drain ended: a stream that hangs never fails by itself.
        open_ = [r for r in self.records if not r.end]
        drained_at = getattr(self, "drained_at", perf_counter())
        span = len(s.levels) * s.segment_s  # server seconds

        def at(t: float) -> float:
            return (t - t0) * k

        chunks = sorted((at(t), n) for r in ok for t, n in zip(r.times, r.counts, strict=True))
        gaps = [(at(b) - at(a), at(b)) for r in ended for a, b in pairwise(r.times)]
        itls = _token_latencies(ok, at, k)
        stalled = {r.seq for r in ended for a, b in pairwise(r.times) if (b - a) * k > s.stall_s}
        # An open stream's silence runs from its last chunk (or its start) to the drain's end.
        silent = [(drained_at - (r.times[-1] if r.times else r.start)) * k for r in open_]
        stalled |= {r.seq for r, g in zip(open_, silent, strict=True) if g > s.stall_s}
        total = sum(n for t, n in chunks if t < span)
        return PhaseResult(
            levels=tuple(s.levels),
            segment_s=s.segment_s,
            bins=_bins(s, ok, chunks, itls, at),
            segments=_segments(s, ok, chunks, itls, at),
            requests=len(ok),
            errors=len(ended) - len(ok),
            unfinished=len(open_),
            stalls=len(stalled),
            longest_gap_s=max([*(g for g, _ in gaps), *silent], default=0.0),
            output_throughput=total / span,
        )


def _token_latencies(
    ok: list[RequestRecord], at: Callable[[float], float], k: float
) -> list[tuple[float, float]]:
    """(when, ms) per token: a chunk of n tokens after a gap g is n latencies of g / n, chunks
    without tokens skipped (as RequestRecord.itl_samples), each placed at its chunk's
    arrival."""
    itls: list[tuple[float, float]] = []
    for r in ok:
        prev = None
        for t, n in zip(r.times, r.counts, strict=True):
            if n <= 0:
                continue
            if prev is not None:
                itls.append((at(t), (t - prev) * k * 1000 / n))
            prev = t
    return itls


def _bins(
    s: PhaseSettings,
    ok: list[RequestRecord],
    chunks: list[tuple[float, int]],
    itls: list[tuple[float, float]],
    at: Callable[[float], float],
) -> tuple[dict[str, Any], ...]:
    """The phase in bins of a fraction of a segment: tok/s, TTFT p50 and ITL p99 in each."""
    k = s.time_scale
    width = s.segment_s / BINS_PER_SEGMENT
    bins = []
    for b in range(len(s.levels) * BINS_PER_SEGMENT):
        lo, hi = b * width, (b + 1) * width
        tokens = sum(n for t, n in chunks if lo <= t < hi)
        ttft = percentiles(
            (v * k * 1000 for r in ok if r.first_token_at is not None
             and lo <= at(r.first_token_at) < hi and (v := r.ttft()) is not None),
            (50.0,),
        )[0]  # fmt: skip
        itl = percentiles((v for t, v in itls if lo <= t < hi), (99.0,))[0]
        bins.append(
            {
                "t_s": lo,
                "concurrency": s.levels[b // BINS_PER_SEGMENT],
                "tok_s": tokens / width,
                "ttft_ms_p50": ttft,
                "itl_ms_p99": itl,
            }
        )
    return tuple(bins)


def _segments(
    s: PhaseSettings,
    ok: list[RequestRecord],
    chunks: list[tuple[float, int]],
    itls: list[tuple[float, float]],
    at: Callable[[float], float],
) -> tuple[Segment, ...]:
    """Each segment once it settled: its throughput, requests and tail latencies."""
    k = s.time_scale
    segments = []
    for n, c in enumerate(s.levels):
        lo = (n + SETTLE_SHARE) * s.segment_s
        hi = (n + 1) * s.segment_s
        tokens = sum(m for t, m in chunks if lo <= t < hi)
        started = [r for r in ok if lo <= at(r.start) < hi]
        segments.append(
            Segment(
                concurrency=c,
                start_s=n * s.segment_s,
                end_s=hi,
                output_throughput=tokens / (hi - lo),
                requests=sum(1 for r in ok if lo <= at(r.end) < hi),
                ttft_ms_p99=percentiles(
                    (v * k * 1000 for r in started if (v := r.ttft()) is not None), (99.0,)
                )[0],
                itl_ms_p99=percentiles((v for t, v in itls if lo <= t < hi), (99.0,))[0],
            )
        )
    return tuple(segments)


def judge(
    phase: PhaseResult,
    fixed: dict[int, float],
    switches: tuple[TierSwitch, ...] = (),
    *,
    resolution_s: float = 0.0,
) -> PhaseResult:
    """The phase with the server's tier switches and its verdict: did the config hold up?

    `fixed` is the config's tok/s at each fixed level. It did not hold up when a stream
    stalled or failed, when its tier flapped at a steady load, or when a segment served
    less than BROKE_BELOW of what the same load served at its fixed level. A switch counts
    as steady only `resolution_s` (how precisely it is timed) inside a segment's steady part.
    """
    problems: list[str] = []
    if phase.errors:
        problems.append(f"{phase.errors} requests failed during the phase")
    if phase.unfinished:
        problems.append(f"{phase.unfinished} streams had not finished when the drain ended")
    if phase.stalls:
        problems.append(
            f"{phase.stalls} streams stalled (longest silence {phase.longest_gap_s:.1f} s)"
        )
    seg = phase.segment_s
    steady = [
        sw
        for sw in switches
        if SETTLE_SHARE * seg + resolution_s <= sw.at_s % seg <= seg - resolution_s
        and sw.at_s < len(phase.levels) * seg
    ]
    minutes = len(phase.levels) * phase.segment_s * (1 - SETTLE_SHARE) / 60.0
    per_min = len(steady) / minutes if minutes > 0 else 0.0
    if switches and per_min > FLAP_PER_MIN:
        problems.append(
            f"its tier flapped: {len(steady)} switches at steady load "
            f"({per_min:.0f}/min, more than {FLAP_PER_MIN:g})"
        )
    for seg in phase.segments:
        want = fixed.get(seg.concurrency)
        if want and seg.output_throughput < BROKE_BELOW * want:
            problems.append(
                f"at c={seg.concurrency} from {seg.start_s:g} s it served "
                f"{seg.output_throughput:.0f} tok/s, {seg.output_throughput / want:.2f}x its "
                f"fixed level's {want:.0f}"
            )
    return PhaseResult(
        **{
            **{f: getattr(phase, f) for f in phase.__dataclass_fields__},
            "switches": tuple(switches),
            "switches_per_min_steady": round(per_min, 2) if switches else None,
            "held_up": not problems,
            "problems": tuple(problems),
        }
    )


def _rounded(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 3) if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_rounded(v) for v in x]
    return x
