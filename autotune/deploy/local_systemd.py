"""Deployment mode `local-systemd`: a systemd unit on the machine autotune runs on."""

from __future__ import annotations

import os

from autotune.deploy.gpu_wait import GpuWaitSettings
from autotune.deploy.runner import LocalRunner
from autotune.deploy.systemd import SystemdDeployer, SystemdSettings

__all__ = ["local_systemd_deployer"]


def local_systemd_deployer(
    systemd: SystemdSettings,
    gpu_wait: GpuWaitSettings | None = None,
    *,
    sudo: bool | None = None,
    command_timeout_s: float = 60.0,
) -> SystemdDeployer:
    """A Deployer for `systemd.unit` here; `sudo=None` uses `sudo -n` unless running as root."""
    use_sudo = os.geteuid() != 0 if sudo is None else sudo
    runner = LocalRunner(command_timeout_s=command_timeout_s)
    return SystemdDeployer(runner, systemd, sudo=use_sudo, gpu_wait=gpu_wait)
