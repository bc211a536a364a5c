"""Fixtures for the deploy tests: a real sshd on 127.0.0.1, a stand-in systemd host, sudo users."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autotune.deploy.local_process import LocalProcessDeployer
from autotune.deploy.ssh_runner import SSHSettings
from autotune.testservers.sshd import SshServer, keygen, sshd_missing_reason
from tests.helpers.fake_systemd_host import FakeSystemdHost


def let_go(dep: LocalProcessDeployer) -> None:
    """Stop what a local-process deployer started, whatever state a test left it in. Each
    deploy stops the previous process group, so only the last one can be left."""
    dep.keep_running = False
    with contextlib.suppress(Exception):
        dep.close()
    if dep.pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(dep.pid, signal.SIGKILL)


@pytest.fixture
def world_dir() -> Iterator[Path]:
    """A temporary directory other users can traverse (pytest's tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="autotune-deploy-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def fake_host(world_dir: Path) -> Iterator[FakeSystemdHost]:
    host = FakeSystemdHost(world_dir / "host")
    yield host
    host.cleanup()


@dataclass
class SshRig:
    """A running sshd, a client key it accepts for root, and a known_hosts file that knows it."""

    server: SshServer
    client_key: Path
    known_hosts: Path

    def settings(self, **overrides: Any) -> SSHSettings:
        values: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": self.server.port,
            "user": "root",
            "key_file": str(self.client_key),
            "known_hosts": str(self.known_hosts),
            "use_agent": False,
            "connect_timeout_s": 5.0,
            "command_timeout_s": 30.0,
            "keepalive_s": 5.0,
            "reconnect_timeout_s": 20.0,
        }
        values.update(overrides)
        return SSHSettings(**values)

    def target_ssh(self) -> dict[str, Any]:
        """`target.ssh` of a config that reaches this sshd, as a user would write it."""
        ssh = self.settings()
        keys = ("host", "port", "user", "key_file", "known_hosts", "use_agent",
                "connect_timeout_s", "command_timeout_s")  # fmt: skip
        return {k: getattr(ssh, k) for k in keys}


@pytest.fixture
def ssh_rig(world_dir: Path) -> Iterator[SshRig]:
    reason = sshd_missing_reason()
    if reason:
        pytest.skip(reason)
    server = SshServer(world_dir / "sshd")
    client_key = keygen(world_dir / "client" / "id_ed25519")
    server.authorize("root", client_key)
    known_hosts = server.write_known_hosts(world_dir / "client" / "known_hosts")
    server.start()
    try:
        yield SshRig(server, client_key, known_hosts)
    finally:
        server.stop()


@pytest.fixture
def make_user(ssh_rig: SshRig, world_dir: Path) -> Iterator[Callable[[list[str]], str]]:
    """Create a login user that ssh_rig's client key opens, allowed `sudo -n` for `commands`."""
    created: list[str] = []
    sudoers: list[Path] = []

    def make(commands: list[str]) -> str:
        if shutil.which("sudo") is None:
            pytest.skip("sudo missing: apt-get install -y sudo")
        name = f"attest{uuid.uuid4().hex[:8]}"
        home = world_dir / "home" / name
        home.parent.mkdir(exist_ok=True)
        subprocess.run(
            ["/usr/sbin/useradd", "-m", "-d", str(home), "-s", "/bin/sh", name],
            check=True,
            capture_output=True,
        )
        created.append(name)
        # "!" (useradd's default) is a locked account, which sshd refuses even for keys.
        subprocess.run(["/usr/sbin/usermod", "-p", "*", name], check=True, capture_output=True)
        ssh_rig.server.authorize(name, ssh_rig.client_key)
        if commands:
            # sudo skips files in sudoers.d whose names contain a dot.
            path = Path("/etc/sudoers.d") / f"autotune-test-{name}"
            path.write_text(f"{name} ALL=(root) NOPASSWD: {', '.join(commands)}\n")
            path.chmod(0o440)
            sudoers.append(path)
            subprocess.run(["/usr/sbin/visudo", "-cf", str(path)], check=True, capture_output=True)
        return name

    yield make
    # Sessions of the users must end before userdel accepts to remove them.
    ssh_rig.server.stop()
    for path in sudoers:
        path.unlink(missing_ok=True)
    for name in created:
        subprocess.run(["/usr/sbin/userdel", "-f", "-r", name], capture_output=True, check=False)
