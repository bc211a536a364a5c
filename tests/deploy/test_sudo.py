"""A non-root SSH user goes through `sudo -n`; a missing right is reported before any change."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from autotune.deploy.hostfiles import SH
from autotune.deploy.ssh import ssh_deployer
from autotune.errors import DeployError
from tests.deploy.conftest import SshRig
from tests.helpers.fake_systemd_host import FakeSystemdHost, unit_text

UNIT = "sglang-test.service"
ORIGINAL = unit_text("original")


def _untouched(host: FakeSystemdHost) -> None:
    assert host.unit_path(UNIT).read_text() == ORIGINAL
    assert not (host.unit_dir / f"{UNIT}.autotune-orig").exists()
    assert not (host.root / "autotune.lock").exists()
    assert [c[0] for c in host.calls()] == ["daemon-reload", "start"]  # the set-up's own


def test_user_with_sudo_rights_deploys_and_restores(
    ssh_rig: SshRig, fake_host: FakeSystemdHost, make_user: Callable[[list[str]], str]
) -> None:
    user = make_user([SH, fake_host.systemctl, fake_host.journalctl])
    fake_host.install(UNIT, ORIGINAL)
    settings = ssh_rig.settings(user=user)
    assert settings.needs_sudo
    with ssh_deployer(settings, fake_host.settings(UNIT)) as dep:
        dep.preflight()
        dep.deploy(unit_text("trial"))
        # Written as root through sudo, in the root-owned unit directory.
        assert fake_host.unit_path(UNIT).stat().st_uid == 0
        assert "server trial" in _eventually_logs(dep)
        dep.restore()
    assert fake_host.unit_path(UNIT).read_text() == ORIGINAL


def _eventually_logs(dep) -> str:  # type: ignore[no-untyped-def]
    import time

    deadline = time.monotonic() + 10
    while "server" not in (text := dep.logs()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return text


def test_user_without_sudo_is_stopped_by_preflight_before_any_change(
    ssh_rig: SshRig, fake_host: FakeSystemdHost, make_user: Callable[[list[str]], str]
) -> None:
    user = make_user([])
    fake_host.install(UNIT, ORIGINAL)
    with (
        ssh_deployer(ssh_rig.settings(user=user), fake_host.settings(UNIT)) as dep,
        pytest.raises(
            DeployError, match=rf"user {user} on .* may not run `/bin/sh` with `sudo -n`"
        ),
    ):
        dep.preflight()
    _untouched(fake_host)


def test_missing_right_for_systemctl_is_named(
    ssh_rig: SshRig, fake_host: FakeSystemdHost, make_user: Callable[[list[str]], str]
) -> None:
    user = make_user([SH, fake_host.journalctl])
    fake_host.install(UNIT, ORIGINAL)
    with (
        ssh_deployer(ssh_rig.settings(user=user), fake_host.settings(UNIT)) as dep,
        pytest.raises(DeployError, match=rf"may not run `{fake_host.systemctl}` with `sudo -n`"),
    ):
        dep.preflight()
    _untouched(fake_host)


def test_without_preflight_a_missing_right_is_still_a_deploy_error(
    ssh_rig: SshRig, fake_host: FakeSystemdHost, make_user: Callable[[list[str]], str]
) -> None:
    user = make_user([])
    fake_host.install(UNIT, ORIGINAL)
    with (
        ssh_deployer(ssh_rig.settings(user=user), fake_host.settings(UNIT)) as dep,
        pytest.raises(DeployError, match="sudo"),
    ):
        dep.deploy(unit_text("trial"))
    _untouched(fake_host)
