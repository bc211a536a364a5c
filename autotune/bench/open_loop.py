"""One open-loop level: requests arrive at a rate, whether or not earlier ones finished.

A closed loop of C clients measures the best a config does with C requests in flight;
traffic arrives at a rate instead, with bursts, and what an operator signs up to is
goodput: requests per second served inside the latency targets. Timeline of a level:

    arrivals for duration_s (Poisson, or a trace's shape) ──► drain (at most drain_s)

Figures follow vLLM's and SGLang's serving benchmarks: throughput and goodput are
counted over the level's span, from the first arrival to the last completion; a
request is good when its TTFT and its time per output token are within the SLOs.
Requests still running after the drain are cancelled: neither completed nor good.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from time import perf_counter
from typing import Any

from autotune import log
from autotune.bench.arrivals import Trace, arrival_times
from autotune.bench.client import Streamer, open_streamer
from autotune.bench.deck import PromptDeck
from autotune.bench.degenerate import is_degenerate
from autotune.bench.record import RequestRecord
from autotune.bench.runner import ProgressFn
from autotune.bench.stats import percentiles
from autotune.bench.workload import Workload

TICK_S = 0.1
PROGRESS_EVERY_S = 1.0
_log = log.get("autotune.bench")


@dataclass(frozen=True)
class Slo:
    """What makes one request good. None: that target is not set."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    attainment: float = 0.9
    """A rate meets the SLOs when at least this share of its requests is good."""

    def good(self, rec: RequestRecord, k: float = 1.0) -> bool:
        """`k` turns the record's wall seconds into the server's (a sped-up rehearsal)."""
        if not rec.ok:
            return False
        ttft = rec.ttft()
        if self.ttft_ms is not None and (ttft is None or ttft * k * 1000 > self.ttft_ms):
            return False
        tpot = rec.tpot()
        return self.tpot_ms is None or tpot is None or tpot * k * 1000 <= self.tpot_ms

    def describe(self) -> str:
        parts = [
            *([f"TTFT <= {self.ttft_ms:g} ms"] if self.ttft_ms is not None else []),
            *([f"TPOT <= {self.tpot_ms:g} ms"] if self.tpot_ms is not None else []),
        ]
        return " and ".join(parts) or "any completed request"


@dataclass(frozen=True)
class RateSettings:
    rate: float
    """Mean requests per second offered, in the server's time."""
    duration_s: float = 20.0
    """Arrivals span this long; the drain comes on top."""
    trace: Trace | None = None
    """Replay this trace's shape at `rate`; None: Poisson arrivals."""
    seed: int = 0
    slo: Slo = field(default_factory=Slo)
    server_slots: int | None = None
    """Requests the server runs at once: the rest of those in flight are queued."""
    drain_s: float | None = None
    """Longest wait for the requests in flight after the last arrival; None: duration_s."""
    request_timeout_s: float = 300.0
    time_scale: float = 1.0
    """The server runs this many times faster than the wall clock (a rehearsal): arrivals
    are sent this much faster and every figure is reported in the server's time."""
    max_in_flight: int = 1024
    """Connections the client opens at most; an arrival beyond them is counted as refused
    (the server is far past keeping up) rather than queued inside the client."""

    def __post_init__(self) -> None:
        if not self.rate > 0 or not self.duration_s > 0 or not self.time_scale > 0:
            raise ValueError("rate, duration_s and time_scale must be positive")


@dataclass(frozen=True)
class RateResult:
    """What one open-loop level measured; every figure in the server's time."""

    rate: float
    arrivals: str
    """"poisson" or the trace's file name."""
    slo: str
    sent: int
    completed: int
    errors: int
    unfinished: int
    """Still running when the drain ended (cancelled), or refused for the client's cap."""
    good: int
    span_s: float
    request_throughput: float
    output_throughput: float
    goodput: float
    """Good requests per second over the span."""
    good_share: float
    meets_slo: bool
    """At least the SLO's attainment share good, and nothing left unfinished."""
    ttft_ms_p50: float | None
    ttft_ms_p99: float | None
    tpot_ms_p50: float | None
    tpot_ms_p99: float | None
    e2e_s_p50: float | None
    e2e_s_p99: float | None
    in_flight_mean: float
    in_flight_max: int
    queued_mean: float | None
    """In flight above the server's slots (None: slots unknown): waiting, not running."""
    queued_max: int | None
    degenerate_share: float
    duration_s: float
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["notes"] = list(self.notes)
        # The rate stays exact: an objective names its rate and finds it by value.
        return {
            k: round(v, 4) if isinstance(v, float) and k != "rate" else v for k, v in out.items()
        }


async def run_rate(
    base_url: str,
    model: str | None,
    workload: Workload,
    settings: RateSettings,
    *,
    api_key: str | None = None,
    endpoint: str = "chat",
    deck: PromptDeck | None = None,
    on_progress: ProgressFn | None = None,
) -> RateResult:
    """Send the workload's requests at `settings.rate`/s for `settings.duration_s` and wait
    for them (at most `drain_s`). Never raises for failed requests: they are counted."""
    s = settings
    k = s.time_scale
    offsets = [t / k for t in arrival_times(s.rate, s.duration_s, seed=s.seed, trace=s.trace)]
    deck = deck if deck is not None else PromptDeck(workload.prompts)
    async with open_streamer(
        base_url,
        s.max_in_flight,
        workload,
        endpoint=endpoint,
        model=model,
        api_key=api_key,
        timeout_s=s.request_timeout_s / k,
    ) as streamer:
        level = _OpenLoop(streamer, workload, s, deck, offsets, on_progress)
        return await level.run()


class _OpenLoop:
    def __init__(
        self,
        streamer: Streamer,
        workload: Workload,
        settings: RateSettings,
        deck: PromptDeck,
        offsets: list[float],
        on_progress: ProgressFn | None,
    ) -> None:
        self.streamer = streamer
        self.workload = workload
        self.s = settings
        self.deck = deck
        self.offsets = offsets
        self.on_progress = on_progress
        self.records: list[RequestRecord] = []
        self.refused = 0
        self.in_flight = 0
        self.samples: list[int] = []
        self.tasks: set[asyncio.Task[RequestRecord]] = set()

    async def run(self) -> RateResult:
        t0 = perf_counter()
        sampler = asyncio.create_task(self._sample(t0))
        try:
            for i, offset in enumerate(self.offsets):
                delay = t0 + offset - perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                if self.in_flight >= self.s.max_in_flight:
                    self.refused += 1
                    continue
                rec = RequestRecord(-1, i, self.workload.max_tokens)
                prompt, _ = self.deck.draw()
                self.records.append(rec)
                self.in_flight += 1
                task = asyncio.create_task(self._send(rec, prompt))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
            drain = self.s.drain_s if self.s.drain_s is not None else self.s.duration_s
            pending = set(self.tasks)
            if pending:
                _, pending = await asyncio.wait(pending, timeout=drain / self.s.time_scale)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
        return self._result(t0, cancelled=len(pending))

    async def _send(self, rec: RequestRecord, prompt: Any) -> RequestRecord:
        try:
            await self.streamer.send(rec, prompt)
        except Exception as exc:  # a broken request is a failed one, never a lost one
            rec.error, rec.end = f"{type(exc).__name__}: {exc}", perf_counter()
        finally:
            self.in_flight -= 1
        if rec.ok:
            rec.finalize(rec.completion_tokens)
        return rec

    async def _sample(self, t0: float) -> None:
        next_progress = t0 + PROGRESS_EVERY_S
        while True:
            await asyncio.sleep(TICK_S)
            self.samples.append(self.in_flight)
            now = perf_counter()
            if now >= next_progress and self.on_progress is not None:
                next_progress = now + PROGRESS_EVERY_S
                done = sum(1 for r in self.records if r.end)
                try:
                    self.on_progress(
                        {
                            "phase": "open-loop",
                            "rate": self.s.rate,
                            "sent": len(self.records),
                            "of": len(self.offsets),
                            "done": done,
                            "in_flight": self.in_flight,
                        }
                    )
                except Exception as exc:  # a broken progress display must not end the level
                    _log.warning("progress callback failed", error=repr(exc))

    def _result(self, t0: float, cancelled: int) -> RateResult:
        s, k = self.s, self.s.time_scale
        finished = [r for r in self.records if r.end]  # a cancelled request never ended
        ok = [r for r in finished if r.ok]
        errors = len(finished) - len(ok)
        unfinished = cancelled + self.refused
        first = t0 + (self.offsets[0] if self.offsets else 0.0)
        last = max((r.end for r in finished), default=first)
        span = max(last - first, 1e-9) * k
        good = sum(1 for r in ok if s.slo.good(r, k))
        tokens = sum(r.output_tokens for r in ok)
        sent = len(self.records) + self.refused
        good_share = good / sent if sent else 0.0
        ttft = percentiles((v * k * 1000 for r in ok if (v := r.ttft()) is not None), _Q)
        tpot = percentiles((v * k * 1000 for r in ok if (v := r.tpot()) is not None), _Q)
        e2e = percentiles((r.e2e() * k for r in ok), _Q)
        slots = s.server_slots
        queued = [max(0, n - slots) for n in self.samples] if slots is not None else None
        notes: list[str] = []
        if unfinished:
            notes.append(
                f"{unfinished} of {sent} requests were still waiting or running "
                f"{s.drain_s if s.drain_s is not None else s.duration_s:g} s after the last "
                "arrival (cancelled): the server does not keep up with this rate"
            )
        if errors:
            reason = next((r.error for r in finished if r.error), "")
            notes.append(f"{errors} of {sent} requests failed; first: {reason}")
        return RateResult(
            rate=s.rate,
            arrivals="poisson" if s.trace is None else s.trace.name,
            slo=s.slo.describe(),
            sent=sent,
            completed=len(ok),
            errors=errors,
            unfinished=unfinished,
            good=good,
            span_s=span,
            request_throughput=len(ok) / span,
            output_throughput=tokens / span,
            goodput=good / span,
            good_share=good_share,
            meets_slo=unfinished == 0 and good_share >= s.slo.attainment,
            ttft_ms_p50=ttft[0],
            ttft_ms_p99=ttft[1],
            tpot_ms_p50=tpot[0],
            tpot_ms_p99=tpot[1],
            e2e_s_p50=e2e[0],
            e2e_s_p99=e2e[1],
            in_flight_mean=sum(self.samples) / len(self.samples) if self.samples else 0.0,
            in_flight_max=max(self.samples, default=0),
            queued_mean=None if queued is None else sum(queued) / max(len(queued), 1),
            queued_max=None if queued is None else max(queued, default=0),
            degenerate_share=sum(is_degenerate(r.text) for r in ok) / len(ok) if ok else 0.0,
            duration_s=(perf_counter() - t0) * k,
            notes=tuple(notes),
        )


_Q = (50.0, 99.0)


def goodput_summary(results: list[RateResult]) -> str:
    """`2/s: 1.9 good/s (96 %)` per rate, for a log line."""
    return ", ".join(
        f"{r.rate:g}/s: {r.goodput:.2f} good/s ({r.good_share:.0%})"
        + ("" if r.meets_slo else " MISSED")
        for r in results
    )
