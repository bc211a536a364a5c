"""Mode `local-systemd`: the same deployer through LocalRunner, against the stand-in systemctl."""

from __future__ import annotations

import time

import pytest

from autotune.deploy.base import Deployer
from autotune.deploy.local_systemd import local_systemd_deployer
from autotune.errors import DeployError
from tests.helpers.fake_systemd_host import FakeSystemdHost, unit_text

UNIT = "sglang-local.service"
ORIGINAL = unit_text("original")


def _logs_with(dep: Deployer, text: str) -> str:
    deadline = time.monotonic() + 10
    while text not in (logs := dep.logs()):
        assert time.monotonic() < deadline, logs
        time.sleep(0.05)
    return logs


def test_local_systemd_round_trip(fake_host: FakeSystemdHost) -> None:
    fake_host.install(UNIT, ORIGINAL)
    fake_host.set_gpu_busy(2)
    with local_systemd_deployer(fake_host.settings(UNIT), fake_host.gpu_wait(), sudo=False) as dep:
        assert isinstance(dep, Deployer)
        assert dep.description == f"{UNIT} via local"
        dep.preflight()
        assert dep.original_unit() == ORIGINAL
        dep.deploy(unit_text("trial-1"))
        logs = _logs_with(dep, "server trial-1")
        assert "original" not in logs
        assert dep.is_running() and dep.exit_status() is None

        dep.deploy(unit_text("bad", "--exit-after", "0", "--code", "2"))
        _logs_with(dep, "exiting with 2")
        deadline = time.monotonic() + 10
        while dep.is_running():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert dep.exit_status() == 2

        dep.restore()
        assert fake_host.unit_path(UNIT).read_text() == ORIGINAL
        _logs_with(dep, "server original")


def test_local_lock_excludes_a_second_deployer(fake_host: FakeSystemdHost) -> None:
    fake_host.install(UNIT, ORIGINAL)
    with local_systemd_deployer(fake_host.settings(UNIT), sudo=False) as first:
        first.original_unit()
        with (
            local_systemd_deployer(fake_host.settings(UNIT), sudo=False) as second,
            pytest.raises(DeployError, match=r"is held by .* pid \d+ since"),
        ):
            second.original_unit()
    # Released by close(): a new deployer gets it.
    with local_systemd_deployer(fake_host.settings(UNIT), sudo=False) as third:
        third.original_unit()


def test_sudo_defaults_to_not_root(
    fake_host: FakeSystemdHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    import autotune.deploy.local_systemd as mode

    monkeypatch.setattr(mode.os, "geteuid", lambda: 1000)
    assert local_systemd_deployer(fake_host.settings(UNIT))._sudo is True
    monkeypatch.setattr(mode.os, "geteuid", lambda: 0)
    assert local_systemd_deployer(fake_host.settings(UNIT))._sudo is False
