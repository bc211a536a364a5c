"""Host keys and client authentication against a real sshd."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog

from autotune.deploy.ssh_runner import SSHRunner
from autotune.errors import DeployError
from autotune.testservers.sshd import keygen
from tests.deploy.conftest import SshRig

SECRET = "correct horse battery staple"


def _whoami(runner: SSHRunner) -> str:
    try:
        return runner.run(["id", "-un"]).out.strip()
    finally:
        runner.close()


def test_known_host_and_key_connect(ssh_rig: SshRig) -> None:
    assert _whoami(SSHRunner(ssh_rig.settings())) == "root"


def test_unknown_host_key_is_refused(ssh_rig: SshRig, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    runner = SSHRunner(ssh_rig.settings(known_hosts=str(known)))
    with pytest.raises(DeployError, match=r"host key of \[127.0.0.1\]:\d+ is unknown .*SHA256:"):
        runner.connect()
    assert not known.exists()  # nothing recorded without the explicit switch


def test_accept_new_host_key_records_it_once(ssh_rig: SshRig, tmp_path: Path) -> None:
    known = tmp_path / "sub" / "known_hosts"
    with structlog.testing.capture_logs() as logs:
        assert (
            _whoami(SSHRunner(ssh_rig.settings(known_hosts=str(known), accept_new_host_key=True)))
            == "root"
        )
    assert known.read_text().strip() == ssh_rig.server.host_entry()
    assert any(entry["event"] == "ssh.host_key_accepted" for entry in logs)
    # Recorded: the next connection trusts it without the switch.
    assert _whoami(SSHRunner(ssh_rig.settings(known_hosts=str(known)))) == "root"


@pytest.mark.parametrize("accept_new", [False, True])
def test_changed_host_key_is_refused(ssh_rig: SshRig, accept_new: bool) -> None:
    before = ssh_rig.known_hosts.read_text()
    ssh_rig.server.new_host_key()
    ssh_rig.server.restart()
    runner = SSHRunner(ssh_rig.settings(accept_new_host_key=accept_new))
    with pytest.raises(DeployError, match=r"has CHANGED.*Refusing to connect"):
        runner.connect()
    assert ssh_rig.known_hosts.read_text() == before


def test_wrong_client_key_is_refused(ssh_rig: SshRig, tmp_path: Path) -> None:
    stranger = keygen(tmp_path / "stranger")
    runner = SSHRunner(ssh_rig.settings(key_file=str(stranger)))
    with pytest.raises(DeployError, match=r"SSH authentication as root@127.0.0.1:.* failed"):
        runner.connect()


def test_missing_key_file(ssh_rig: SshRig, tmp_path: Path) -> None:
    with pytest.raises(DeployError, match="does not exist"):
        SSHRunner(ssh_rig.settings(key_file=str(tmp_path / "none"))).connect()


def test_encrypted_key_needs_its_passphrase(
    ssh_rig: SshRig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = keygen(tmp_path / "locked", passphrase=SECRET)
    ssh_rig.server.authorize("root", locked)
    monkeypatch.delenv("AUTOTUNE_SSH_PASSPHRASE", raising=False)
    with pytest.raises(
        DeployError, match=r"encrypted: put its passphrase in \$AUTOTUNE_SSH_PASSPHRASE"
    ):
        SSHRunner(ssh_rig.settings(key_file=str(locked))).connect()

    monkeypatch.setenv("AUTOTUNE_SSH_PASSPHRASE", SECRET)
    assert _whoami(SSHRunner(ssh_rig.settings(key_file=str(locked)))) == "root"


def test_passphrase_from_a_named_variable_and_never_shown(
    ssh_rig: SshRig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = keygen(tmp_path / "locked", passphrase=SECRET)
    ssh_rig.server.authorize("root", locked)
    settings = ssh_rig.settings(key_file=str(locked), passphrase_env="GPU_KEY_PASS")
    monkeypatch.setenv("GPU_KEY_PASS", SECRET + "-wrong")
    with structlog.testing.capture_logs() as logs, pytest.raises(DeployError) as err:
        SSHRunner(settings).connect()
    assert "wrong passphrase in $GPU_KEY_PASS" in str(err.value)
    assert SECRET not in str(err.value) and SECRET not in repr(logs)

    monkeypatch.setenv("GPU_KEY_PASS", SECRET)
    with structlog.testing.capture_logs() as logs:
        assert _whoami(SSHRunner(settings)) == "root"
    assert SECRET not in repr(logs)
    assert SECRET not in repr(settings)


def test_nothing_listening_fails_fast(ssh_rig: SshRig) -> None:
    ssh_rig.server.stop()
    with pytest.raises(DeployError, match=r"cannot connect to ssh root@127.0.0.1"):
        SSHRunner(ssh_rig.settings()).connect()
