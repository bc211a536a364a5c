"""Deployment mode `ssh`: a systemd unit on a remote GPU host, over one SSH connection."""

from __future__ import annotations

from autotune.deploy.gpu_wait import GpuWaitSettings
from autotune.deploy.ssh_runner import SSHRunner, SSHSettings
from autotune.deploy.systemd import SystemdDeployer, SystemdSettings

__all__ = ["SSHSettings", "ssh_deployer"]


def ssh_deployer(
    ssh: SSHSettings,
    systemd: SystemdSettings,
    gpu_wait: GpuWaitSettings | None = None,
) -> SystemdDeployer:
    """A Deployer for `systemd.unit` on `ssh.host`. Connects lazily; `close()` disconnects."""
    return SystemdDeployer(SSHRunner(ssh), systemd, sudo=ssh.needs_sudo, gpu_wait=gpu_wait)
