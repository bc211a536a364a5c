"""The Engine protocol: what autotune needs to know about one inference server.

An engine adapter reads the server (readiness, resolved settings, capacity,
acceptance) and classifies its failures. It knows nothing about Optuna or how
the unit reached the host.
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


@dataclass(frozen=True)
class Failure:
    """Why a server did not come up with a config."""

    kind: str
    """One of: refused, out_of_memory, crash_on_start, not_ready, crash_during_benchmark."""
    reason: str


class Engine(Protocol):
    name: str

    def health_path(self) -> str:
        """Path that answers 200 only once the server really serves."""

    def ready_in_log(self, log_text: str) -> bool:
        """True once the server's own log says it is ready."""

    async def server_info(
        self, base_url: str, params: list[str], api_key: str | None
    ) -> ServerInfo:
        """Read resolved settings and capacity from the running server."""

    def capacity_from_log(self, log_text: str) -> tuple[int | None, int | None]:
        """(max_total_num_tokens, max_running_requests) from the startup log, if printed."""

    def accept_length_from_log(self, log_text: str) -> float | None:
        """Mean speculative acceptance length over the decode lines in `log_text`."""

    def classify_failure(self, log_text: str, exit_code: int | None) -> Failure:
        """Name the failure of a server that died or never became ready."""
