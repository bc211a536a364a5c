"""The deployer for `target.deploy`: where a new transport is added, beside the others.

Takes the target as a small protocol (the config's `Target` satisfies it) so that this
package needs nothing above it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from autotune.deploy.base import Deployer

#: target.deploy values, one per transport.
TRANSPORTS = ("local-process", "local-systemd", "ssh")


class Target(Protocol):
    deploy: str
    unit: str
    unit_file: Path
    ssh: Mapping[str, Any]
    gpu_wait: Mapping[str, Any] | bool | None
    systemd: Mapping[str, Any]


def make_deployer(
    target: Target,
    *,
    companions: Sequence[str],
    log_dir: Path,
    source: str | None,
    port: int | None = None,
) -> Deployer:
    """A deployer for `target`; `companions` are the host paths of the space's companion
    files, `log_dir` a local process's logs and pidfile, `source` the config file errors
    name, `port` the one the server listens on (its identity is checked by who holds it)."""
    t = target
    if t.deploy == "local-process":
        from autotune.deploy.local_process import LocalProcessDeployer

        # Logs and the pidfile persist beside the study, so a server left by a killed
        # worker is found and stopped by the next start.
        return LocalProcessDeployer(
            t.unit_file, log_dir=log_dir, companion_files=companions, port=port
        )
    from autotune.deploy import settings

    sd = settings.systemd_settings(t.unit, str(t.unit_file), t.systemd, source, companions)
    gw = settings.gpu_wait_settings(t.gpu_wait, source)
    if t.deploy == "ssh":
        from autotune.deploy.ssh import ssh_deployer

        unit = ssh_deployer(settings.ssh_settings(t.ssh, source), sd, gw)
    else:
        from autotune.deploy.local_systemd import local_systemd_deployer

        unit = local_systemd_deployer(sd, gw)
    unit.port = port
    return unit
