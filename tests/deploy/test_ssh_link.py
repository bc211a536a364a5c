"""A dropped SSH link is retried with backoff and never looks like a failed server."""

from __future__ import annotations

import threading
import time

import pytest
import structlog

from autotune.deploy.ssh import ssh_deployer
from autotune.deploy.ssh_runner import SSHRunner
from autotune.errors import DeployError
from tests.deploy.conftest import SshRig
from tests.helpers.fake_systemd_host import FakeSystemdHost, unit_text

UNIT = "sglang-test.service"


def _restart_later(rig: SshRig, delay: float) -> threading.Thread:
    thread = threading.Thread(target=lambda: (time.sleep(delay), rig.server.start()), daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
def test_link_dropped_mid_trial_reconnects_and_the_server_still_runs(
    ssh_rig: SshRig, fake_host: FakeSystemdHost
) -> None:
    fake_host.install(UNIT, unit_text("base"))
    with ssh_deployer(ssh_rig.settings(), fake_host.settings(UNIT)) as deployer:
        deployer.deploy(unit_text("trial-1"))
        assert deployer.is_running()

        # The link goes down mid-trial (sshd and every connection killed) and
        # comes back on the same port two seconds later.
        ssh_rig.server.stop()
        back = _restart_later(ssh_rig, 2.0)
        started = time.monotonic()
        with structlog.testing.capture_logs() as logs:
            running = deployer.is_running()
        back.join()
        assert running, "the server kept running; a dropped link must not look like a crash"
        assert deployer.exit_status() is None
        assert time.monotonic() - started >= 1.5
        events = [entry["event"] for entry in logs]
        assert "ssh.link_lost" in events and "ssh.reconnected" in events
        assert events.count("ssh.reconnect_failed") >= 2  # backoff, not a single retry

        # The next trial deploys normally: the lock, lost with the link, is taken again.
        deployer.deploy(unit_text("trial-2"))
        deadline = time.monotonic() + 10
        while "server trial-2" not in deployer.logs():
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_link_that_stays_down_is_a_deploy_error(ssh_rig: SshRig) -> None:
    runner = SSHRunner(ssh_rig.settings(reconnect_timeout_s=2.0))
    try:
        assert runner.run(["true"]).ok
        ssh_rig.server.stop()
        with pytest.raises(DeployError, match="could not reconnect within 2 s"):
            runner.run(["true"])
    finally:
        runner.close()


def test_command_timeout_keeps_the_link(ssh_rig: SshRig) -> None:
    runner = SSHRunner(ssh_rig.settings())
    try:
        with pytest.raises(DeployError, match="timed out after 1 s"):
            runner.run(["sleep", "10"], timeout=1.0)
        assert runner.run(["echo", "still here"]).out == "still here\n"
    finally:
        runner.close()


def test_big_output_and_stdin_round_trip(ssh_rig: SshRig) -> None:
    payload = bytes(range(256)) * 8192  # 2 MiB, every byte value
    runner = SSHRunner(ssh_rig.settings())
    try:
        result = runner.run(["cat"], stdin=payload)
        assert result.stdout == payload
        both = runner.run(["sh", "-c", "echo out; echo err >&2; exit 4"])
        assert (both.exit_code, both.out, both.err) == (4, "out\n", "err\n")
    finally:
        runner.close()
