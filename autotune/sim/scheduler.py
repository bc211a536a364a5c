"""The scheduler: continuous batching in real wall-clock time, driven by the model.

One loop, as in SGLang's scheduler: when requests wait and a slot is free it
runs a prefill batch, otherwise one decode iteration of every running
request. Each iteration lasts what `model.iteration_time` says for the batch
it started with; iterations are scheduled against absolute deadlines so
event-loop overhead shows up as a little latency, never as lost throughput.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from autotune.engines import sglang_facts as facts
from autotune.sim import adaptive, logs, model
from autotune.sim.profiles import Profile
from autotune.sim.text import TextSource

LOG_INTERVAL = 40  # decode iterations between "Decode batch" lines, as SGLang
RESYNC_AFTER = 0.25  # seconds late: beyond this, skip ahead instead of bursting to catch up
#: /sim/stats' ring of (time, cumulative output tokens), one point per step: exact at
#: every step, so a client's window can be checked against it (a point every 50 ms moved
#: a 3-s window's figure by up to 1 %). 20 000 steps: 4 minutes at a busy profile's 12 ms.
RING_SIZE = 20_000


class Sink(Protocol):
    """Where a request's tokens go (a stream, a pending response, the warmup)."""

    def tokens(self, req: Req, text: str, n: int) -> None: ...

    def finish(self, req: Req) -> None: ...


class Req:
    """One generation request inside the scheduler."""

    __slots__ = (
        "cdf",
        "client",
        "correct_drafts",
        "created",
        "emitted",
        "finished_at",
        "first_token_at",
        "greedy",
        "prompt_tokens",
        "rid",
        "sink",
        "state",
        "stop_by_eos",
        "target",
        "text",
        "verify_ct",
    )

    def __init__(
        self,
        rid: str,
        prompt_tokens: int,
        target: int,
        *,
        greedy: bool,
        stop_by_eos: bool,
        cdf: tuple[float, ...],
        text: TextSource,
        sink: Sink,
        client: bool = True,
    ) -> None:
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.target = target
        self.greedy = greedy
        self.stop_by_eos = stop_by_eos
        self.cdf = cdf
        self.text = text
        self.sink = sink
        self.client = client  # False for the startup warmup: not in /sim/stats
        self.emitted = 0
        self.verify_ct = 0
        self.correct_drafts: list[int] = []
        """Verify steps that accepted exactly 0, 1, 2, ... drafts (SGLang 0.5.23's
        `spec_correct_drafts_histogram`)."""
        self.created = time.monotonic()
        self.first_token_at = 0.0
        self.finished_at = 0.0
        self.state = "waiting"  # waiting | running | finished | aborted

    @property
    def finish_reason(self) -> str:
        return "stop" if self.stop_by_eos else "length"


class Stats:
    """Counters since start (client requests only unless named otherwise)."""

    def __init__(self) -> None:
        self.started_mono = time.monotonic()
        self.started_wall = time.time()
        self.received = 0
        self.finished = 0
        self.aborted = 0
        self.output_tokens = 0
        self.prompt_tokens = 0
        self.verify_steps = 0
        self.decode_tokens = 0  # tokens from verify steps (prefill emits each first token)
        self.decode_iterations = 0
        self.prefill_batches = 0
        # Including the warmup, like SGLang's cumulative avg_spec_accept_length.
        self.all_decode_tokens = 0
        self.all_verify_steps = 0
        self.lag_sum = 0.0
        self.lag_max = 0.0
        self.lag_n = 0
        self.resyncs = 0
        self.flushes = 0
        self.last_gen_throughput = 0.0
        self.last_accept_len = 0.0
        self.last_accept_rate = 0.0
        self.ring: deque[tuple[float, int]] = deque(maxlen=RING_SIZE)
        self.last_emit = 0.0

    def tick(self, now: float) -> None:
        """Called after each emission; every request of a step emits at the step's `now`,
        so the step's point is updated in place rather than added again."""
        self.last_emit = now
        t = round(now, 4)
        if self.ring and self.ring[-1][0] == t:
            self.ring[-1] = (t, self.output_tokens)
        else:
            self.ring.append((t, self.output_tokens))

    def ring_points(self) -> list[list[float]]:
        """The samples, closed by the last emission: exact there, constant after it."""
        points = [list(x) for x in self.ring]
        if self.last_emit and (not points or self.last_emit > points[-1][0]):
            points.append([round(self.last_emit, 4), self.output_tokens])
        return points


class Scheduler:
    def __init__(
        self,
        profile: Profile,
        resolved: model.Resolved,
        *,
        rng: random.Random,
        noise: float,
        speed_factor: float,
        time_scale: float = 1.0,
    ) -> None:
        self.profile = profile
        self.resolved = resolved
        self.spec = resolved.spec
        self.rng = rng
        self.noise = noise
        self.speed_factor = speed_factor
        self.time_scale = time_scale
        """A rehearsal's speed-up (--sim-speedup): every duration is this much shorter than
        the model says, and what the server reports per second is in the model's units."""
        self.stats = Stats()
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.kv_used = 0
        self._wake = asyncio.Event()
        self._ids = itertools.count()
        self._log_t = time.monotonic()
        self._log_tokens = 0
        self._log_verify = 0
        self._log_spec_tokens = 0
        self.on_iteration: Callable[[], None] | None = None
        # Adaptive speculation: one controller per batch-size entry, tiers chosen per batch.
        self.slots: dict[int, adaptive.Slot] = {}
        self.runtime_steps = self.spec.steps
        """The steps the worker runs now (adaptive: the last batch's entry and tier)."""
        self._graph_sizes = adaptive.routing_sizes()
        self._cdfs: dict[tuple[int, bool], tuple[float, ...]] = {}
        self.loop_share = 0.0
        """Share of sampled replies that loop (--sim-loop-share)."""
        self.corpus: set[int] = set()
        """Prompts seen since start or the last /flush_cache: NGRAM drafts a repeated
        prompt from its earlier answer (SGLang's corpus of earlier requests' tokens)."""
        self.live_steps = resolved.spec.steps
        """The steps of the last decode iteration (adaptive: the tier in use)."""

    # -- requests ---------------------------------------------------------------
    def accept_cdf(self, greedy: bool, *, seen: bool = False) -> tuple[float, ...]:
        workload = "greedy" if greedy else "replay" if seen and self.spec.ngram else "natural"
        dist = model.accept_dist(self.profile, self.spec, workload)
        return tuple(itertools.accumulate(dist))

    def remember(self, prompt_key: int) -> bool:
        """Whether the corpus had this prompt; it has it from now on."""
        seen = prompt_key in self.corpus
        self.corpus.add(prompt_key)
        return seen

    def idle(self) -> bool:
        return not self.running and not self.waiting

    def flush(self) -> None:
        """SGLang's flush_cache: the radix cache and NGRAM's corpus emptied."""
        self.corpus.clear()
        self.stats.flushes += 1

    def new_id(self) -> str:
        return f"{next(self._ids):x}{self.rng.getrandbits(96):024x}"

    def submit(self, req: Req) -> None:
        if req.client:
            self.stats.received += 1
            self.stats.prompt_tokens += req.prompt_tokens
        self.waiting.append(req)
        self._wake.set()

    def abort(self, req: Req) -> None:
        """The client went away: free the slot at the next iteration, as SGLang does."""
        if req.state in ("waiting", "running"):
            if req.state == "running":
                self.kv_used -= req.prompt_tokens + req.emitted
            req.state = "aborted"
            if req.client:
                self.stats.aborted += 1

    # -- the loop ---------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()
            batch = self._admit()
            if batch:
                tokens = sum(r.prompt_tokens for r in batch)
                logs.sched(
                    logs.prefill_line(
                        len(batch),
                        tokens,
                        self.kv_used / self.resolved.max_total_num_tokens,
                        len(self.running),
                        len(self.waiting),
                    )
                )
                deadline += model.prefill_time(self.profile, tokens) * self._jitter()
                deadline = await self._sleep_until(loop, deadline)
                self._after_prefill(batch)
            elif self.running:
                n = len(self.running)
                slot = self._slot(n)
                spec = self.spec if slot is None else model.chain(slot.steps)
                if slot is not None:
                    self._apply_runtime_state(slot.steps)
                dt = model.iteration_time(
                    self.profile, spec, n, self.kv_used, overlap=self.resolved.overlap
                )
                deadline += dt * self._jitter()
                deadline = await self._sleep_until(loop, deadline)
                self._after_decode(spec, slot)
            if self.on_iteration is not None:
                self.on_iteration()

    def _jitter(self) -> float:
        """Wall seconds per model second of this step: the start's speed, the step's jitter,
        a rehearsal's speed-up."""
        if self.noise <= 0:
            return self.speed_factor / self.time_scale
        j = self.rng.gauss(1.0, self.noise)
        return self.speed_factor * min(1.3, max(0.7, j)) / self.time_scale

    async def _sleep_until(self, loop: asyncio.AbstractEventLoop, deadline: float) -> float:
        delay = deadline - loop.time()
        await asyncio.sleep(delay if delay > 0 else 0)
        late = loop.time() - deadline
        st = self.stats
        st.lag_n += 1
        st.lag_sum += max(late, 0.0)
        st.lag_max = max(st.lag_max, late)
        if late > RESYNC_AFTER:
            st.resyncs += 1
            return loop.time()
        return deadline

    def _admit(self) -> list[Req]:
        """Waiting requests that fit: a free slot, KV room, one chunk of prefill tokens."""
        batch: list[Req] = []
        tokens = 0
        free = self.resolved.max_running_requests - len(self.running)
        room = self.resolved.max_total_num_tokens - self.kv_used
        while self.waiting and len(batch) < free:
            req = self.waiting[0]
            if req.state == "aborted":
                self.waiting.popleft()
                continue
            if batch and tokens + req.prompt_tokens > model.CHUNKED_PREFILL_SIZE:
                break
            if req.prompt_tokens + tokens > room and (batch or self.running):
                break
            self.waiting.popleft()
            batch.append(req)
            tokens += req.prompt_tokens
        return batch

    def _after_prefill(self, batch: list[Req]) -> None:
        now = time.monotonic()
        self.stats.prefill_batches += 1
        for req in batch:
            if req.state == "aborted":
                continue
            req.state = "running"
            req.first_token_at = now
            self.kv_used += req.prompt_tokens
            self.running.append(req)
            self._emit(req, 1, now)
        self._drop_done()

    def _apply_runtime_state(self, steps: int) -> None:
        """As SGLang's worker applies the batch's state before it runs (eagle_worker_v2.py,
        apply_runtime_state): a tier the controller chose, or another batch-size entry's
        tier when the batch moved into its range. Either way the line is logged."""
        if steps != self.runtime_steps:
            was = self.runtime_steps
            logs.sched(facts.TIER_SWITCH.text.format(was, steps, was + 1, steps + 1))
            self.runtime_steps = steps

    def _slot(self, batch: int) -> adaptive.Slot | None:
        config = self.resolved.adaptive
        if config is None:
            return None
        entry = config.entry_for(batch, self._graph_sizes)
        slot = self.slots.get(entry.min_batch)
        if slot is None:
            slot = self.slots[entry.min_batch] = adaptive.Slot(entry, self.spec.steps)
        return slot

    def _cdf(self, steps: int, greedy: bool) -> tuple[float, ...]:
        cdf = self._cdfs.get((steps, greedy))
        if cdf is None:
            workload = "greedy" if greedy else "natural"
            dist = model.accept_dist(self.profile, model.chain(steps), workload)
            cdf = self._cdfs[(steps, greedy)] = tuple(itertools.accumulate(dist))
        return cdf

    def _after_decode(self, spec: model.Spec, slot: adaptive.Slot | None) -> None:
        now = time.monotonic()
        rng_random = self.rng.random
        st = self.stats
        decoded = 0
        steps = 0
        self.live_steps = spec.steps
        for req in self.running:
            if req.state != "running":
                continue
            cdf = req.cdf if slot is None else self._cdf(spec.steps, req.greedy)
            n = bisect_right(cdf, rng_random()) + 1
            accepted = n - 1
            left = req.target - req.emitted
            if n > left:
                n = left
            steps += 1
            decoded += n
            if spec.on or slot is None:
                # An adaptive tier of 0 steps drafts nothing: no verify step to count.
                req.verify_ct += 1
                hist = req.correct_drafts
                if len(hist) <= accepted:
                    hist.extend([0] * (accepted - len(hist) + 1))
                hist[accepted] += 1
                if req.client:
                    st.verify_steps += 1
                    st.decode_tokens += n
            self._emit(req, n, now)
        self._drop_done()
        st.decode_iterations += 1
        self._log_tokens += decoded
        if spec.on or slot is None:
            st.all_decode_tokens += decoded
            st.all_verify_steps += steps
            self._log_spec_tokens += decoded
            self._log_verify += steps
        if slot is not None and steps:
            before = slot.steps
            switched = slot.observe(decoded / steps - 1.0)
            if switched is not None:
                logs.sched(
                    f"Adaptive spec params updated: steps {before} -> {switched} "
                    f"(ema_accept_len={slot.ema:.2f})"
                )
        if st.decode_iterations % LOG_INTERVAL == 0:
            self._log_decode(now, spec)

    def _emit(self, req: Req, n: int, now: float) -> None:
        req.emitted += n
        self.kv_used += n
        if req.client:
            self.stats.output_tokens += n
            self.stats.tick(now)
        req.sink.tokens(req, req.text.take(n), n)
        if req.emitted >= req.target and req.state == "running":
            req.state = "finished"
            req.finished_at = now
            self.kv_used -= req.prompt_tokens + req.emitted
            if req.client:
                self.stats.finished += 1
            req.sink.finish(req)

    def _drop_done(self) -> None:
        if any(r.state != "running" for r in self.running):
            self.running = [r for r in self.running if r.state == "running"]

    def _log_decode(self, now: float, spec: model.Spec) -> None:
        st = self.stats
        span = max(now - self._log_t, 1e-9)
        st.last_gen_throughput = self._log_tokens / span / self.time_scale
        accept_len = accept_rate = None
        if spec.on and self._log_verify:
            accept_len = self._log_spec_tokens / self._log_verify
            accept_rate = model.accept_rate(spec, accept_len)
            st.last_accept_len, st.last_accept_rate = accept_len, accept_rate
        self._log_t, self._log_tokens, self._log_verify = now, 0, 0
        self._log_spec_tokens = 0
        total = self.resolved.max_total_num_tokens
        logs.sched(
            logs.decode_line(
                len(self.running),
                self.kv_used,
                self.kv_used / total,
                accept_len,
                accept_rate,
                len(self.running) <= self.resolved.cuda_graph_max_bs,
                st.last_gen_throughput,
                len(self.waiting),
            )
        )

    # -- introspection ----------------------------------------------------------
    def avg_accept_length(self) -> float | None:
        st = self.stats
        if not (self.spec.on or self.resolved.adaptive) or not st.all_verify_steps:
            return None
        return st.all_decode_tokens / st.all_verify_steps

    def snapshot(self) -> dict[str, Any]:
        st = self.stats
        now_mono, now_wall = time.monotonic(), time.time()
        return {
            "time": {"monotonic": now_mono, "wall": now_wall},
            "started": {"monotonic": st.started_mono, "wall": st.started_wall},
            "requests": {
                "received": st.received,
                "finished": st.finished,
                "aborted": st.aborted,
                "running": sum(1 for r in self.running if r.client),
                "queued": sum(1 for r in self.waiting if r.client and r.state == "waiting"),
            },
            "output_tokens": st.output_tokens,
            "prompt_tokens": st.prompt_tokens,
            "verify_steps": st.verify_steps,
            "decode_tokens": st.decode_tokens,
            "accept_length": st.decode_tokens / st.verify_steps if st.verify_steps else None,
            "decode_iterations": st.decode_iterations,
            "prefill_batches": st.prefill_batches,
            "cache_flushes": st.flushes,
            "kv_tokens_used": self.kv_used,
            "speed_factor": round(self.speed_factor, 5),
            "scheduler": {
                "lag_mean_ms": round(st.lag_sum / st.lag_n * 1000, 3) if st.lag_n else 0.0,
                "lag_max_ms": round(st.lag_max * 1000, 3),
                "resyncs": st.resyncs,
            },
            "ring": st.ring_points(),
        }
