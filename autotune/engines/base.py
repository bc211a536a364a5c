"""The Engine protocol: what autotune needs to know about one inference server.

An engine adapter reads the server (readiness, resolved settings, capacity,
acceptance, token counters) and classifies its failures. It knows nothing
about Optuna or how the unit reached the host. The shared code speaks one
vocabulary: `max_running_requests` is "requests the server runs at once"
(SGLang's scheduler cap, llama.cpp's slots); accept length is tokens per
verify step, the bonus token included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ServerInfo:
    """What the running server says it is actually running with."""

    resolved: dict[str, Any]
    """Tuned parameters as the server resolved them (study names, e.g. speculative_num_steps)."""
    max_running_requests: int | None
    max_total_num_tokens: int | None
    context_len: int | None = None
    version: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    launch_flags: dict[str, str | bool] | None = None
    """The flags on the server's own record of its command line, each with its value (True
    for a bare switch); None when the engine keeps no such record."""
    time_scale: float = 1.0
    """How many times faster than the server it stands for this one runs: 1 for a real
    server; autotune's simulator in a sped-up rehearsal (`--sim-speedup`) says so. Every
    figure autotune records is converted back to real-server units."""


#: Failure kinds that are the installed server's or the unit's fault, never the trial's
#: config: the study stops with one line instead of recording every trial as infeasible.
#: The host's own failures (a program missing, no GPU, the port taken) are `host.HOST_FAILURES`.
STUDY_FAILURES = ("unsupported_flag", "malformed_flag", "model_load")


@dataclass(frozen=True)
class Failure:
    """Why a server did not come up with a config, or stopped serving it."""

    kind: str
    """One of: refused, out_of_memory, crash_on_start, not_ready, crash_during_benchmark,
    context_too_small (requests do not fit the server's context); the STUDY_FAILURES:
    unsupported_flag (this build does not have the flag, or the field of a JSON flag),
    malformed_flag (a value not in the form the build parses, such as text that is not JSON
    for a JSON flag), model_load (this build cannot run the unit's model); and the host's
    (`engines/host.py`): program_missing, module_missing, no_gpu, model_missing, disk_full,
    permission_denied, port_in_use, not_ours (another server answers on the port)."""
    reason: str
    flag: str | None = None
    """The launch flag the server named, when it named one."""


@dataclass(frozen=True)
class Counters:
    """A server's cumulative counters since it started; None where it keeps no such count."""

    output_tokens: float | None = None
    draft_tokens: float | None = None
    """Draft tokens proposed for verification."""
    accepted_tokens: float | None = None
    drafts: float | None = None
    """Verify steps that checked a draft."""
    accepted_per_position: tuple[float, ...] | None = None
    """Accepted draft tokens by their place in the draft (0 first), where the server counts
    them (vLLM): position k is accepted only if every earlier one was."""

    def since(self, before: Counters) -> Counters:
        """The counts between `before` and this snapshot."""

        def minus(now: float | None, then: float | None) -> float | None:
            return None if now is None or then is None else now - then

        return Counters(
            minus(self.output_tokens, before.output_tokens),
            minus(self.draft_tokens, before.draft_tokens),
            minus(self.accepted_tokens, before.accepted_tokens),
            minus(self.drafts, before.drafts),
            _positions(self.accepted_per_position, before.accepted_per_position, -1.0),
        )

    def plus(self, other: Counters) -> Counters:
        """The counts of two spans together (a level measured twice)."""

        def add(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a + b

        return Counters(
            add(self.output_tokens, other.output_tokens),
            add(self.draft_tokens, other.draft_tokens),
            add(self.accepted_tokens, other.accepted_tokens),
            add(self.drafts, other.drafts),
            _positions(self.accepted_per_position, other.accepted_per_position, 1.0),
        )

    @property
    def acceptance_per_position(self) -> tuple[float, ...] | None:
        """Share of drafts whose token at each position was accepted; None where the server
        does not count by position or nothing was drafted."""
        if not self.drafts or self.accepted_per_position is None:
            return None
        return tuple(a / self.drafts for a in self.accepted_per_position)

    @property
    def accept_length(self) -> float | None:
        """Tokens per verify step (1 + accepted / drafts); None when nothing was drafted."""
        if not self.drafts or self.accepted_tokens is None:
            return None
        return 1.0 + self.accepted_tokens / self.drafts

    @property
    def acceptance(self) -> float | None:
        """Share of drafted tokens that were accepted."""
        if not self.draft_tokens or self.accepted_tokens is None:
            return None
        return self.accepted_tokens / self.draft_tokens


def _positions(
    a: tuple[float, ...] | None, b: tuple[float, ...] | None, sign: float
) -> tuple[float, ...] | None:
    """a + sign * b by position; a position one side has not seen yet counts zero there (a
    counter the server creates when it is first incremented)."""
    if a is None or b is None:
        return None
    n = max(len(a), len(b))
    a, b = (*a, *[0.0] * (n - len(a))), (*b, *[0.0] * (n - len(b)))
    return tuple(x + sign * y for x, y in zip(a, b, strict=True))


class Engine(Protocol):
    algorithm_flag: str
    name: str
    default_port: int
    """Where the server listens when its unit does not say (`autotune init`)."""
    default_host: str
    """The address it listens on without `--host` ("" for every interface)."""
    launch_hint: str
    """What its launch command looks like, for the line that says none was recognised."""
    init_constraints: tuple[tuple[str, int], ...]
    """`objective.constraints` a first config (`autotune init`) starts with."""
    concurrency_flags: tuple[str, ...]
    """Unit flags that cap how many requests the server runs at once: `autotune init` keeps
    its benchmark levels and floor within the smallest the unit sets."""

    def launched_by(self, argv: list[str]) -> bool:
        """True when `argv` (a unit's ExecStart, split as systemd splits it) starts this
        engine's server."""

    def default_space(self, flags: dict[str, str | None]) -> tuple[str, str]:
        """(built-in search space file, why) for a unit that runs with `flags` now."""

    def time_scale(self, argv: list[str]) -> float:
        """How many times faster than real time this command line's server runs: a
        rehearsal's simulator (`--sim-speedup`), 1.0 for a real server."""
        ...

    def load_seconds(self, argv: list[str]) -> float | None:
        """From start to ready with this command line, before one start was measured: the
        model's size at the engine's measured load rate (`engines/loading.py`); None when
        the model's size or the rate is not known here."""
        ...

    def ready_paths(self) -> tuple[str, ...]:
        """Paths that answer 200 only once the server really serves, best first; a 404 (a
        build without the path) moves on to the next."""

    def ready_in_log(self, log_text: str) -> bool:
        """True once the server's own log says it is ready."""

    async def server_info(
        self, base_url: str, params: list[str], api_key: str | None
    ) -> ServerInfo:
        """Read resolved settings and capacity from the running server."""

    async def counters(self, base_url: str, api_key: str | None) -> Counters | None:
        """The server's cumulative token and speculation counters, or None if it exposes none.

        Read before and after a level; the difference is that level's server-side count.
        """

    async def flush_cache(self, base_url: str, api_key: str | None) -> str:
        """Empty what the server kept from earlier requests (prefix cache, a learning
        speculator's store) where it allows: called before every level, so that no level
        is served from what an earlier one taught the server. What was done, or why
        nothing was, in one line (recorded on the level)."""

    def launch_flags_from_log(self, log_text: str) -> dict[str, str | bool] | None:
        """The server's record of its own command line as its startup log prints it (each flag
        with its value, True for a bare switch); None when the log has none. Read when
        `server_info` has no `launch_flags`."""

    def capacity_from_log(self, log_text: str) -> tuple[int | None, int | None]:
        """(max_total_num_tokens, max_running_requests) from the startup log, if printed."""

    def accept_length_from_log(self, log_text: str) -> float | None:
        """Mean speculative acceptance length over the decode lines in `log_text`."""

    def tier_switches(self, log_text: str) -> list[tuple[float | None, int, int]]:
        """(seconds after the first time-stamped line of `log_text`, or None; steps before;
        steps after) for each switch of speculation depth the server logged (an adaptive
        controller's tiers); [] for an engine that switches silently or never. Relative to
        the log's own clock: the server's host may keep another time zone or clock."""

    def classify_failure(self, log_text: str, exit_code: int | None) -> Failure:
        """Name the failure of a server that died or never became ready."""

    def runs(self, asked: dict[str, Any]) -> dict[str, Any]:
        """The values the server runs when launched with `asked` (study names): the engine's
        own documented adjustments applied. What it then reports differently never reached it."""

    def help_args(self) -> list[str] | None:
        """Arguments that make the server print every flag it accepts and exit; None when
        asking is too costly to do before a study (it would load the framework)."""

    def flag_problems(self, help_text: str, flags: list[str]) -> dict[str, str]:
        """Of `flags`, those this build does not accept, each with why (from its help)."""

    def request_failure(self, log_text: str) -> Failure | None:
        """Why a live server failed requests during a level, when its log says it is the
        config's fault (a context too small for the workload); None otherwise."""
