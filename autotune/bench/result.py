"""What a level is asked to do (`LevelSettings`) and what it measured (`LevelResult`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from autotune.bench.intervals import Samples
from autotune.engines.base import Counters


@dataclass(frozen=True)
class LevelSettings:
    """How one concurrency level runs."""

    concurrency: int
    min_duration_s: float = 5.0
    """Shortest steady-state window measured (ramp-up, warmup and drain come on top)."""
    max_duration_s: float = 60.0
    """Longest steady-state window; reached when the CI target is not met before."""
    ci_width: float | None = 0.02
    """Stop once the 95 % CI half-width of output throughput is within this fraction
    of it (checked from min_duration_s on). None: measure exactly min_duration_s."""
    warmup_requests: int | None = None
    """Requests sent and discarded before measuring. None: one per slot, which also
    opens all C connections before the clock starts."""
    warmup_max_tokens: int = 16
    """Warmup requests are short: they exist to open connections and wake the
    server, and the steady-state window already excludes the ramp-up."""
    request_timeout_s: float = 300.0
    server_slots: int | None = None
    """Requests the server runs at once (its max_running_requests), if known. Above
    it the rest queue: the window then opens once that many workers stream, and
    requests still queued when the level stops are cancelled instead of drained."""
    max_error_share: float = 0.05
    """More failed requests than this share of the measured ones fails the level."""

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if not 0 < self.min_duration_s <= self.max_duration_s:
            raise ValueError(
                f"need 0 < min_duration_s <= max_duration_s, "
                f"got {self.min_duration_s} and {self.max_duration_s}"
            )
        if self.ci_width is not None and not 0 < self.ci_width < 1:
            raise ValueError(f"ci_width must be a fraction in (0, 1), got {self.ci_width}")
        if self.warmup_requests is not None and self.warmup_requests < 0:
            raise ValueError(f"warmup_requests must be >= 0, got {self.warmup_requests}")
        if self.warmup_max_tokens < 1:
            raise ValueError(f"warmup_max_tokens must be >= 1, got {self.warmup_max_tokens}")
        if self.request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        if self.server_slots is not None and self.server_slots < 1:
            raise ValueError(f"server_slots must be >= 1, got {self.server_slots}")
        if not 0 <= self.max_error_share < 1:
            raise ValueError(f"max_error_share must be in [0, 1), got {self.max_error_share}")

    @property
    def busy_slots(self) -> int:
        """How many requests the server decodes at once under this load."""
        if self.server_slots is None:
            return self.concurrency
        return min(self.concurrency, self.server_slots)

    @property
    def warmup_count(self) -> int:
        return self.concurrency if self.warmup_requests is None else self.warmup_requests


WINDOW_DESCRIPTION = (
    "steady state: from the moment {busy} requests stream at once to the first "
    "worker's last response after the stop; ramp-up and drain excluded"
)


#: Latency percentiles (LevelResult fields): multiplied back by a rehearsal's speed-up.
_LATENCIES = tuple(
    f"{kind}_{q}"
    for kind in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_s")
    for q in ("p50", "p90", "p99")
)


@dataclass(frozen=True)
class LevelResult:
    """One concurrency level, measured. Latencies in ms (e2e in s); rates per second.

    Throughput figures come from the steady-state window only; request counts
    and latency percentiles are described field by field.
    """

    concurrency: int
    workload: str
    endpoint: str
    requests: int
    """Successful measured requests (warmup excluded), whole measured phase."""
    errors: int
    """Failed measured requests (HTTP error, connection cut, malformed chunk, timeout)."""
    output_tokens: int
    """Output tokens that arrived inside the window (the server's count, per chunk)."""
    input_tokens: int
    """Prompt tokens of requests whose first token arrived inside the window."""
    window_s: float
    output_throughput: float
    """Output tokens/s over the window: the objective."""
    total_throughput: float
    """(input + output tokens)/s over the window."""
    request_rate: float
    """Requests completed inside the window, per second."""
    window_requests: int
    ttft_ms_p50: float | None
    ttft_ms_p90: float | None
    ttft_ms_p99: float | None
    itl_ms_p50: float | None
    itl_ms_p90: float | None
    itl_ms_p99: float | None
    tpot_ms_p50: float | None
    tpot_ms_p90: float | None
    tpot_ms_p99: float | None
    e2e_s_p50: float | None
    e2e_s_p90: float | None
    e2e_s_p99: float | None
    latency_requests: int
    """Requests behind the latency percentiles: those that started inside the
    window (all measured requests if none did)."""
    usage_source: str
    """Where token counts came from: usage | meta_info | text-recount."""
    window: str
    degenerate_share: float
    """Share of successful measured requests whose output loops (see degenerate.py)."""
    ci_halfwidth: float
    """95 % CI half-width of output_throughput, as a fraction of it (batch means)."""
    ci_halfwidth_tok_s: float
    ci_lag1: float
    """Lag-1 autocorrelation of the batch means (the CI was widened for it if > 0)."""
    ci_target_met: bool
    chunks: int
    """SSE chunks with output, over successful measured requests."""
    tokens_per_chunk: float
    mean_output_tokens: float
    """Per successful measured request."""
    finished_by_length: float
    """Share of successful measured requests that stopped at max_tokens."""
    accept_length: float | None
    """Mean tokens per verify step, from per-request `spec_verify_ct` (native
    endpoint only); never from the server's cumulative average."""
    temperature: float
    ignore_eos: bool
    max_tokens: int
    warmup_requests: int
    ramp_up_s: float
    drain_s: float
    duration_s: float
    """Wall time of the whole level: warmup, ramp-up, window and drain."""
    window_start_unix: float
    window_end_unix: float
    window_start_monotonic: float
    """The window on `time.monotonic()`, to match a server's counters on the same host."""
    window_end_monotonic: float
    error_reasons: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    sent_output_tokens: int = 0
    """Output tokens of every successful request of the level, warmup included: what the
    server's own counter should have grown by (compare with its counters)."""
    draft_tokens: int | None = None
    """Draft tokens proposed over every request of the level, warmup included, from the
    requests' own `timings` (llama.cpp); None when the server sends none."""
    draft_accepted: int | None = None
    cut_short: bool = False
    """The window ended early because the caller's `give_up` said the config cannot win
    (`autotune/search/pruning.py`): the figures hold, with the CI of the shorter window."""
    server: Counters | None = None
    """The server's own counters over the level (read before and after it, warmup
    included); None when it keeps none."""
    attempt_throughputs: tuple[float, ...] = ()
    """A level measured twice and pooled (bench/pool.py): each run's throughput."""
    accept_histogram: tuple[int, ...] | None = None
    """Verify steps of the measured requests that accepted exactly 0, 1, 2, ... drafts
    (SGLang's per-request `spec_correct_drafts_histogram`, summed): acceptance per position."""
    prompts_repeated: int = 0
    """Measured requests whose prompt this trial had sent before (bench/deck.py: only once
    the workload ran out, each pass with its own prefix)."""
    cache_flush: str | None = None
    """What was done to the server's caches before the level (`flushed: POST /flush_cache`),
    or why nothing was; None when nobody asked (a bare `autotune bench`)."""
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    """95 % intervals of the statistics constraints judge (degenerate_share, ttft_ms_p99,
    itl_ms_p50), from the level's own requests (bench/intervals.py)."""
    samples: Samples | None = field(default=None, compare=False, repr=False)
    """The per-request figures behind `intervals`, to pool a level measured twice; not
    recorded."""

    @property
    def draft_acceptance(self) -> float | None:
        """Share of drafted tokens accepted, from the requests' own counts."""
        if not self.draft_tokens or self.draft_accepted is None:
            return None
        return self.draft_accepted / self.draft_tokens

    @property
    def error_share(self) -> float:
        attempts = self.requests + self.errors
        return self.errors / attempts if attempts else 0.0

    def in_server_time(self, time_scale: float) -> LevelResult:
        """This level as the server it stands for would show it, when the measured one ran
        `time_scale` times faster (a sped-up rehearsal): rates divided, durations and
        latencies multiplied; counts, shares and the relative CI unchanged."""
        if time_scale == 1.0:
            return self
        k = time_scale

        def slow(v: float | None) -> float | None:
            return None if v is None else v * k

        return dataclasses.replace(
            self,
            output_throughput=self.output_throughput / k,
            total_throughput=self.total_throughput / k,
            request_rate=self.request_rate / k,
            ci_halfwidth_tok_s=self.ci_halfwidth_tok_s / k,
            window_s=self.window_s * k,
            ramp_up_s=self.ramp_up_s * k,
            drain_s=self.drain_s * k,
            duration_s=self.duration_s * k,
            **{name: slow(getattr(self, name)) for name in _LATENCIES},
            attempt_throughputs=tuple(v / k for v in self.attempt_throughputs),
            intervals={
                name: (lo * k, hi * k) if "_ms_" in name else (lo, hi)
                for name, (lo, hi) in self.intervals.items()
            },
            samples=None if self.samples is None else self.samples.scaled(k),
            notes=(*self.notes, f"a rehearsal {k:g}x faster than real time: real-server units"),
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-safe (no NaN or infinity; tuples as lists)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, dict):
                value = {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}
            elif isinstance(value, (Counters, Samples)):
                continue  # flattened below, or not recorded
            out[f.name] = value
        out["error_share"] = self.error_share
        out["draft_acceptance"] = self.draft_acceptance
        if self.server is not None:
            out["server_output_tokens"] = self.server.output_tokens
            out["server_draft_tokens"] = self.server.draft_tokens
            out["server_accepted_tokens"] = self.server.accepted_tokens
            out["server_drafts"] = self.server.drafts
            out["server_accept_length"] = self.server.accept_length
            out["server_draft_acceptance"] = self.server.acceptance
            per_position = self.server.acceptance_per_position
            if per_position is not None:
                out["server_acceptance_per_position"] = [round(r, 4) for r in per_position]
        return out
