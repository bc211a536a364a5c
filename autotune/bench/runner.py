"""One concurrency level: warmup, a closed loop of C streams, the steady window, stop, drain.

Timeline of a level (C workers, each sending its next request when the last ends):

    warmup ──► ramp-up ──► window (measured) ──► stop ──► drain
               until the last worker's   until the first worker runs out
               first token               of work after the stop

The stopping rule runs every tick on the live token counts: stop once the
window is at least `min_duration_s` long and the 95 % batch-means CI of
throughput is within `ci_width`, or at `max_duration_s`. All figures in the
result are then recomputed from the exact per-request counts.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from time import perf_counter
from typing import Any

from autotune import log
from autotune.bench.client import Streamer, open_streamer
from autotune.bench.deck import PromptDeck
from autotune.bench.degenerate import is_degenerate
from autotune.bench.intervals import Samples
from autotune.bench.protocol import ENDPOINTS, Prompt
from autotune.bench.record import RequestRecord, estimate_tokens
from autotune.bench.result import WINDOW_DESCRIPTION, LevelResult, LevelSettings
from autotune.bench.stats import batch_means_ci, percentiles
from autotune.bench.window import (
    LiveRate,
    burst_end,
    input_tokens_in,
    throughput_ci,
    tokens_in,
)
from autotune.bench.workload import Workload
from autotune.errors import AutotuneError

TICK_S = 0.2
PROGRESS_EVERY_S = 1.0
#: The live confidence interval must be this share of benchmark.ci_width before a level stops.
CI_STOP_MARGIN = 0.9
ABORT_MIN_ERRORS = 3
"""A dead or refusing server fails the level early: this many errors, over half of all tries."""

_log = log.get("autotune.bench")
_warned_no_usage: set[str] = set()  # one log warning per server, not one per level


class LevelFailed(AutotuneError):
    """The level could not be measured: server unreachable, refusing, or too many errors.

    `result` holds what was measured when there was anything to measure, so the
    caller can store it with the verdict.
    """

    def __init__(self, reason: str, result: LevelResult | None = None) -> None:
        self.reason = reason
        self.result = result
        super().__init__(reason)


ProgressFn = Callable[[dict[str, Any]], None]
#: Asked every tick once the window is min_duration_s long, with the window's tok/s so far
#: and its relative 95 % CI: True ends the window there (the config cannot win anyway).
GiveUpFn = Callable[[float, float], bool]


async def run_level(
    base_url: str,
    model: str | None,
    workload: Workload,
    settings: LevelSettings,
    *,
    api_key: str | None = None,
    endpoint: str = "chat",
    on_progress: ProgressFn | None = None,
    give_up: GiveUpFn | None = None,
    deck: PromptDeck | None = None,
) -> LevelResult:
    """Measure one concurrency level of a running OpenAI-compatible or SGLang server.

    `model` None asks `/v1/models` (and sends no model if that fails). `deck` is where
    prompts come from: the trial's one, so that no level repeats what an earlier level or
    a warm-up sent; None: a fresh deck of the workload's prompts.
    Raises `LevelFailed` when the server cannot be measured or more than
    `settings.max_error_share` of the measured requests fail.
    """
    async with open_streamer(
        base_url,
        settings.concurrency,
        workload,
        endpoint=endpoint,
        model=model,
        api_key=api_key,
        timeout_s=settings.request_timeout_s,
    ) as streamer:
        deck = deck if deck is not None else PromptDeck(workload.prompts)
        return await _Level(streamer, workload, settings, deck, on_progress, give_up).run()


class _Level:
    def __init__(
        self,
        streamer: Streamer,
        workload: Workload,
        settings: LevelSettings,
        deck: PromptDeck,
        on_progress: ProgressFn | None,
        give_up: GiveUpFn | None = None,
    ) -> None:
        self.streamer = streamer
        self.deck = deck
        self.sent: dict[int, Prompt] = {}
        self.repeated: set[int] = set()
        """Seqs whose prompt the trial had sent before (the deck ran out)."""
        self.give_up = give_up
        self.cut_short = False
        self.endpoint = streamer.endpoint
        self.workload = workload
        self.settings = settings
        self.on_progress = on_progress
        c = settings.concurrency
        self.seq = 0
        self.usage_mode: bool | None = None  # True: server sends counts; False: re-count text
        self.recounted = False
        self.notes: list[str] = []
        self.records: list[RequestRecord] = []
        self.warmup_records: list[RequestRecord] = []
        self.inflight: list[RequestRecord | None] = [None] * c
        self.first_token: list[float | None] = [None] * c
        self.last_end: list[float] = [0.0] * c
        self.errors = 0
        self.reasons: Counter[str] = Counter()
        self.stopping = False
        self.abort_reason: str | None = None
        self.win_start: float | None = None
        self.stop_at: float | None = None
        self.t_level = perf_counter()
        self.t0 = self.t_level
        self.live = LiveRate(self.t0)
        self.workers: list[asyncio.Task[None]] = []
        self.cancelled: set[int] = set()

    # -- phases ------------------------------------------------------------------

    async def run(self) -> LevelResult:
        await self._warmup()
        self.t0 = perf_counter()
        self.live = LiveRate(self.t0)
        workers = [asyncio.create_task(self._worker(i)) for i in range(self.settings.concurrency)]
        self.workers = workers
        monitor = asyncio.create_task(self._monitor(workers))
        try:
            pending: set[asyncio.Task[None]] = set(workers)
            while pending:
                done, _ = await asyncio.wait(
                    [*pending, monitor], return_when=asyncio.FIRST_COMPLETED
                )
                if monitor in done:
                    # The monitor never returns; if it failed, nothing would stop the workers.
                    monitor.result()
                pending -= done
        finally:
            monitor.cancel()
            for task in workers:
                task.cancel()
            await asyncio.gather(monitor, *workers, return_exceptions=True)
        if self.abort_reason is not None:
            raise LevelFailed(self.abort_reason)
        return self._result()

    async def _warmup(self) -> None:
        n = self.settings.warmup_count
        if n == 0:
            return
        max_tokens = min(self.workload.max_tokens, self.settings.warmup_max_tokens)
        records = [RequestRecord(-1, 0, max_tokens, warmup=True) for _ in range(n)]
        self.warmup_records = records
        queue = list(reversed(records))
        self._progress({"phase": "warmup", "requests": 0, "of": n})

        async def drain_queue() -> None:
            while queue:
                rec = queue.pop()
                rec.seq = self._next_seq()
                await self.streamer.send(rec, self._draw(rec.seq))

        # min(n, C) requests at once: with n >= C all C connections are open
        # before the measured phase starts.
        await asyncio.gather(*(drain_queue() for _ in range(min(n, self.settings.concurrency))))
        good = [r for r in records if r.ok]
        if not good:
            raise LevelFailed(f"warmup failed, server at {self._where()}: {records[0].error}")
        failed = n - len(good)
        if failed:
            self.notes.append(f"{failed} of {n} warmup requests failed: {_first_error(records)}")
        if any(r.completion_tokens is not None for r in good):
            self.usage_mode = True
        else:
            self._no_usage()

    async def _worker(self, i: int) -> None:
        first = True
        while not self.stopping:
            max_tokens = self._first_max_tokens(i) if first else self.workload.max_tokens
            first = False
            seq = self._next_seq()
            rec = RequestRecord(i, seq, max_tokens)
            self.inflight[i] = rec
            await self.streamer.send(rec, self._draw(seq))
            self.inflight[i] = None
            self._done(rec)

    def _first_max_tokens(self, i: int) -> int:
        """Stagger the first request of each worker over 1/C .. C/C of max_tokens.

        With fixed-length outputs (ignore_eos) C requests started together would
        also end together, forever: the server would see waves of C prefills
        instead of a steady mix. Staggered first lengths spread the ends evenly
        from the start. The first requests still run at full concurrency, so
        their tokens count; their latencies do not (see `_latency_population`).
        """
        c = self.settings.concurrency
        return max(1, math.ceil(self.workload.max_tokens * (i + 1) / c))

    def _done(self, rec: RequestRecord) -> None:
        if rec.ok and rec.completion_tokens is None:
            if self.usage_mode is None:
                self._no_usage()
            elif self.usage_mode:
                rec.error = "stream ended without usage although include_usage was asked"
        if rec.ok:
            if rec.completion_tokens is None:
                self.recounted = True
            rec.finalize(rec.completion_tokens)
            if self.usage_mode is None:
                self.usage_mode = True
        else:
            self.errors += 1
            self.reasons[_reason_key(rec.error)] += 1
        self.live.finish(rec)
        if rec.worker >= 0:
            if self.first_token[rec.worker] is None and rec.first_token_at is not None:
                self.first_token[rec.worker] = rec.first_token_at
            self.last_end[rec.worker] = rec.end
        self.records.append(rec)
        attempts = len(self.records)
        if self.errors >= ABORT_MIN_ERRORS and self.errors * 2 > attempts:
            self._abort(f"{self.errors} of {attempts} requests failed; last: {rec.error}")

    def _no_usage(self) -> None:
        self.usage_mode = False
        msg = (
            f"server at {self._where()} sent no token counts (stream_options.include_usage "
            "unsupported?): output tokens are re-counted from the text (~4 characters per "
            "token, at least one per chunk) and are approximate"
        )
        if msg not in self.notes:
            self.notes.append(msg)
            if self._where() not in _warned_no_usage:
                _warned_no_usage.add(self._where())
                _log.warning("no usage in stream", detail=msg)

    def _abort(self, reason: str) -> None:
        if self.abort_reason is None:
            self.abort_reason = reason
            self.stopping = True

    # -- monitor: ramp-up, stopping rule, progress ------------------------------------

    async def _monitor(self, workers: list[asyncio.Task[None]]) -> None:
        s = self.settings
        next_progress = self.t0 + PROGRESS_EVERY_S
        while True:
            await asyncio.sleep(TICK_S)
            now = perf_counter()
            for rec in self.inflight:
                if rec is not None:
                    self.live.feed(rec)
            if self.abort_reason is not None:
                for task in workers:
                    task.cancel()
                await asyncio.Event().wait()  # the level ends us when the workers are gone
            if self.win_start is None:
                self._check_ramp_up(now)
            ci: float | None = None
            if self.win_start is not None and not self.stopping:
                window = now - self.win_start
                ci = self._live_ci(now)
                # The live estimate uses the batches so far; the reported one is computed
                # again over the final window (up to the last request's end), which can come
                # out a little wider: stop with a margin so that the target is still met.
                target = None if s.ci_width is None else s.ci_width * CI_STOP_MARGIN
                if window >= s.max_duration_s or (
                    window >= s.min_duration_s and (target is None or ci <= target)
                ):
                    self.stopping = True
                    self.stop_at = now
                elif window >= s.min_duration_s and self._gives_up(now, ci):
                    self.stopping = self.cut_short = True
                    self.stop_at = now
            if self.stopping and self.abort_reason is None:
                self._cancel_queued()
            if now >= next_progress:
                next_progress = now + PROGRESS_EVERY_S
                self._progress(self._live_status(now, ci))

    def _gives_up(self, now: float, ci: float) -> bool:
        if self.give_up is None or self.win_start is None or not math.isfinite(ci):
            return False
        rate = self.live.rate(self.win_start, now)
        try:
            return rate > 0 and self.give_up(rate, ci)
        except Exception as exc:  # a broken caller must not end the level
            _log.warning("give_up callback failed", error=repr(exc))
            return False

    def _cancel_queued(self) -> None:
        """After the stop, drop requests the server still queues (only when C > its slots).

        They have streamed nothing, so nothing of theirs is in the window; and the
        window ends at the first finish after the stop, before any of them could
        have started. Draining them would cost (C / slots) request durations.
        """
        s = self.settings
        if s.server_slots is None or s.concurrency <= s.server_slots:
            return
        for i, rec in enumerate(self.inflight):
            if rec is not None and rec.first_token_at is None and i not in self.cancelled:
                self.cancelled.add(i)
                self.workers[i].cancel()

    def _check_ramp_up(self, now: float) -> None:
        for i, rec in enumerate(self.inflight):
            if self.first_token[i] is None and rec is not None and rec.first_token_at is not None:
                self.first_token[i] = rec.first_token_at
        started = sorted(t for t in self.first_token if t is not None)
        need = self.settings.busy_slots
        if len(started) >= need:
            # With C above the server's slots, FIFO admission fills the slots first;
            # from then on the queue keeps the server saturated.
            self.win_start = started[need - 1]
        elif now - self.t0 > self.settings.request_timeout_s:
            waiting = sum(t is None for t in self.first_token)
            self._abort(
                f"{waiting} of {self.settings.concurrency} workers got no first token within "
                f"{self.settings.request_timeout_s:g} s: the server does not run "
                f"{self.settings.concurrency} requests at once"
            )

    def _live_ci(self, now: float) -> float:
        assert self.win_start is not None
        batches = self.live.window_batches(self.win_start, now)
        if not batches:
            return math.inf
        m, hw, _ = batch_means_ci(batches)
        return hw / m if m > 0 else math.inf

    def _live_status(self, now: float, ci: float | None) -> dict[str, Any]:
        if self.win_start is None:
            phase = "ramp-up"
        elif self.stopping:
            phase = "drain"
        else:
            phase = "measuring"
        window = 0.0
        if self.win_start is not None:
            window = (self.stop_at or now) - self.win_start
        return {
            "phase": phase,
            "concurrency": self.settings.concurrency,
            "elapsed_s": round(now - self.t_level, 2),
            "window_s": round(window, 2),
            "requests": len(self.records) - self.errors,
            "errors": self.errors,
            "tok_s": round(self.live.rate(now - 1.0, now), 1),
            "window_tok_s": (
                round(self.live.rate(self.win_start, self.stop_at or now), 1)
                if self.win_start is not None
                else None
            ),
            "ci": None if ci is None or not math.isfinite(ci) else round(ci, 4),
        }

    def _progress(self, status: dict[str, Any]) -> None:
        if self.on_progress is not None:
            try:
                self.on_progress(status)
            except Exception as exc:  # a broken progress display must not end the level
                _log.warning("progress callback failed", error=repr(exc))

    # -- helpers -------------------------------------------------------------------

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq - 1

    def _draw(self, seq: int) -> Prompt:
        prompt, again = self.deck.draw()
        self.sent[seq] = prompt
        if again:
            self.repeated.add(seq)
        return prompt

    def _where(self) -> str:
        return f"{self.streamer.client.base_url}{ENDPOINTS[self.endpoint]}"

    # -- the result ------------------------------------------------------------------

    def _result(self) -> LevelResult:
        """The level's record, assembled from its parts: the steady window and the client's
        figures over it, the latencies, what the server said of its drafts, when it ran."""
        s = self.settings
        ok = [r for r in self.records if r.ok]
        attempts = len(self.records)
        if not ok or self.win_start is None:
            why = _first_error(self.records)
            raise LevelFailed(f"no successful request at concurrency {s.concurrency}: {why}")
        chunk_times = sorted(t for r in ok for t in r.times)
        start = burst_end(chunk_times, self.win_start)
        end = burst_end(
            chunk_times, min(t for i, t in enumerate(self.last_end) if i not in self.cancelled)
        )
        lat = [r for r in ok if r.start >= start] or ok
        result = LevelResult(
            **self._what_ran(ok),
            **_throughput(ok, start, end, self._input_tokens(ok, start, end), s.ci_width),
            **_latencies(ok, lat),
            **_drafts(ok, (*self.warmup_records, *ok)),
            **self._when(start, end),
        )
        if self.errors > s.max_error_share * attempts:
            raise LevelFailed(
                f"{self.errors} of {attempts} requests failed at concurrency {s.concurrency} "
                f"(more than {s.max_error_share:.0%}); most common: "
                f"{self.reasons.most_common(1)[0][0]}",
                result,
            )
        return result

    def _what_ran(self, ok: list[RequestRecord]) -> dict[str, Any]:
        """The level's settings, the workload's, and what the client noticed."""
        s, wl = self.settings, self.workload
        if self.recounted:
            source = "text-recount"
        elif self.endpoint == "generate":
            source = "meta_info"
        else:
            source = "usage"
        busy = (
            f"all {s.concurrency}"
            if s.busy_slots == s.concurrency
            else f"the server's {s.busy_slots} slots (the other {s.concurrency - s.busy_slots} "
            "queue)"
        )
        return {
            "concurrency": s.concurrency,
            "workload": wl.name,
            "endpoint": self.endpoint,
            "requests": len(ok),
            "errors": self.errors,
            "usage_source": source,
            "window": WINDOW_DESCRIPTION.format(busy=busy),
            "cut_short": self.cut_short,
            "temperature": wl.temperature,
            "ignore_eos": wl.ignore_eos,
            "max_tokens": wl.max_tokens,
            "warmup_requests": s.warmup_count,
            "error_reasons": dict(self.reasons.most_common(5)),
            "notes": tuple(self.notes) + self._repeat_note(ok),
            "prompts_repeated": sum(1 for r in ok if r.seq in self.repeated),
        }

    def _when(self, start: float, end: float) -> dict[str, Any]:
        """When the window ran, on the wall clock and the monotonic one, and around it."""
        return {
            "ramp_up_s": start - self.t0,
            "drain_s": max(r.end for r in self.records) - end,
            "duration_s": perf_counter() - self.t_level,
            "window_start_unix": start + _offset(time.time),
            "window_end_unix": end + _offset(time.time),
            "window_start_monotonic": start + _offset(time.monotonic),
            "window_end_monotonic": end + _offset(time.monotonic),
        }

    def _repeat_note(self, ok: list[RequestRecord]) -> tuple[str, ...]:
        repeats = sum(1 for r in ok if r.seq in self.repeated)
        if not repeats:
            return ()
        return (
            f"{repeats} of {len(ok)} measured requests repeated a prompt this trial had sent "
            f"(the workload has {len(self.deck)}; each pass adds its own first line, so no "
            "prefix is cached, but a speculator that learns from earlier answers may accept "
            "more on them): a larger workload measures fresh prompts only",
        )

    def _input_tokens(self, ok: list[RequestRecord], start: float, end: float) -> int:
        if not self.recounted:
            return input_tokens_in(ok, start, end)
        # Without usage the prompt size is estimated from its text, like the output.
        return sum(
            r.prompt_tokens
            if r.prompt_tokens is not None
            else round(estimate_tokens(_prompt_chars(self.sent[r.seq])))
            for r in ok
            if r.first_token_at is not None and start < r.first_token_at <= end
        )


_Q = (50.0, 90.0, 99.0)


def _offset(clock: Callable[[], float]) -> float:
    """What to add to a `perf_counter()` time to read it on `clock`."""
    return clock() - perf_counter()


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _reason_key(error: str | None) -> str:
    return (error or "unknown")[:120]


def _sum_known(values: Iterable[int | None]) -> int | None:
    """Sum of the values a server reported; None when it reported none."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _throughput(
    ok: list[RequestRecord], start: float, end: float, in_tokens: int, ci_width: float | None
) -> dict[str, Any]:
    """The client's figures over the steady window, and the throughput's interval."""
    window_s = end - start
    out_tokens = tokens_in(ok, start, end)
    # The mean of equal-width batch means is `rate` itself.
    _, hw, lag1 = throughput_ci(ok, start, end)
    rate = out_tokens / window_s
    rel = hw / rate if rate > 0 else math.inf
    finished = sum(1 for r in ok if start < r.end <= end)
    return {
        "output_tokens": out_tokens,
        "input_tokens": in_tokens,
        "window_s": window_s,
        "output_throughput": rate,
        "total_throughput": (out_tokens + in_tokens) / window_s,
        "request_rate": finished / window_s,
        "window_requests": finished,
        "ci_halfwidth": rel,
        "ci_halfwidth_tok_s": hw,
        "ci_lag1": lag1,
        "ci_target_met": ci_width is not None and rel <= ci_width,
    }


def _latencies(ok: list[RequestRecord], lat: list[RequestRecord]) -> dict[str, Any]:
    """Per-request latencies of the requests that started in the window (`lat`), with
    their intervals, and the share of degenerate answers over all of them."""
    tpot = percentiles((v for r in lat if (v := r.tpot()) is not None), _Q)
    e2e = percentiles((r.e2e() for r in lat), _Q)
    samples = Samples(
        tuple(v for r in lat if (v := r.ttft()) is not None),
        tuple(tuple(r.itl_samples()) for r in lat),
        tuple(is_degenerate(r.text) for r in ok),
    )
    return {
        **samples.latencies_ms(),  # the same figures a pooled level recomputes
        "tpot_ms_p50": _ms(tpot[0]),
        "tpot_ms_p90": _ms(tpot[1]),
        "tpot_ms_p99": _ms(tpot[2]),
        "e2e_s_p50": e2e[0],
        "e2e_s_p90": e2e[1],
        "e2e_s_p99": e2e[2],
        "latency_requests": len(lat),
        "degenerate_share": sum(samples.degenerate) / len(ok),
        "intervals": samples.intervals(),
        "samples": samples,
    }


def _drafts(ok: list[RequestRecord], sent: tuple[RequestRecord, ...]) -> dict[str, Any]:
    """What the answers say of the tokens and the drafts behind them: per-request verify
    counts and histograms (SGLang's native endpoint), the chunks the stream came in, and
    what every request the level sent (warm-ups included) was billed."""
    chunks = sum(len(r.times) for r in ok)
    all_tokens = sum(r.output_tokens for r in ok)
    verified = [r for r in ok if r.spec_verify_ct]
    accept = (
        sum(r.output_tokens for r in verified) / sum(r.spec_verify_ct or 0 for r in verified)
        if verified
        else None
    )
    return {
        "chunks": chunks,
        "tokens_per_chunk": all_tokens / chunks if chunks else 0.0,
        "mean_output_tokens": all_tokens / len(ok),
        "finished_by_length": sum(1 for r in ok if r.finish_reason == "length") / len(ok),
        "accept_length": accept,
        "accept_histogram": _summed([r.accept_histogram for r in ok if r.accept_histogram]),
        "sent_output_tokens": sum(r.completion_tokens or 0 for r in sent),
        "draft_tokens": _sum_known(r.draft_tokens for r in sent),
        "draft_accepted": _sum_known(r.draft_accepted for r in sent),
    }


def _first_error(records: list[RequestRecord]) -> str:
    return next((r.error for r in records if r.error), "no error recorded")


def _prompt_chars(prompt: Prompt) -> str:
    return prompt if isinstance(prompt, str) else " ".join(m["content"] for m in prompt)


def _summed(histograms: list[list[int]]) -> tuple[int, ...] | None:
    """Per-request histograms of accepted drafts, added position by position."""
    if not histograms:
        return None
    out = [0] * max(len(h) for h in histograms)
    for h in histograms:
        for i, n in enumerate(h):
            out[i] += n
    return tuple(out)
