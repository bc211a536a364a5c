"""The Deployer protocol: how a trial's unit file reaches a host and becomes a running server.

One implementation per transport (local process, local systemd, SSH). Deployers
know nothing about Optuna or HTTP: they move unit text, restart, report state
and hand back the log of the current start.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable


@runtime_checkable
class Deployer(Protocol):
    """Puts a unit on a host and (re)starts it.

    Errors of the transport itself (connection lost, permission denied, disk
    full) raise `autotune.errors.DeployError`: they are never the config's fault.
    """

    #: Human-readable target, for logs ("local process", "ssh root@gpu1").
    description: str

    def preflight(self) -> None:
        """Check that deploying can work (connection, rights, unit) without changing anything."""

    def original_unit(self) -> str:
        """The unit text as it was before this study touched it (backed up once)."""

    def deploy(self, unit_text: str, files: Mapping[str, str | None] | None = None) -> None:
        """Install `unit_text` as the unit, and `files` (host path -> text; None: must not
        exist) beside it, each backed up once; restart the service with them."""

    def is_running(self) -> bool:
        """True while the service's main process is alive (not whether it is ready)."""

    def answering(self) -> str | None:
        """None when the process listening on the server's port is the service this deployer
        started (or the host cannot tell); else who it is, in a few words ("pid 4242
        (python3 -m sglang.launch_server …)"): a stale server or a second instance answers
        in its place, and measuring it would blame the config for another server."""

    def exit_status(self) -> int | None:
        """Exit code of the service's last start if it has ended, else None.

        A death by signal N reads 128 + N, as in a shell.
        """

    def logs(self) -> str:
        """Everything the service printed since the last restart, with the secrets that
        `unit.secrets` knows masked (SGLang prints its API key at startup)."""

    def stop(self) -> None:
        """Stop the service (used only on explicit request; a study never leaves it stopped)."""

    def restore(self) -> None:
        """Put the original unit and companion files back and restart the service with them."""

    def close(self) -> None:
        """Release connections and locks. A local child process is left as the user chose."""
