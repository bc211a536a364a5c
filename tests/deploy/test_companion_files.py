"""Companion files (a search space's `file:` knob): written beside the unit for each trial,
backed up once, and put back byte for byte (or removed, when there was none) by a restore,
also by another process after a crash; over a real SSH connection and locally."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.deploy.local_process import LocalProcessDeployer
from autotune.deploy.ssh import ssh_deployer
from tests.deploy.conftest import SshRig
from tests.helpers.fake_systemd_host import FakeSystemdHost, unit_text

UNIT = "sglang-test.service"
ORIGINAL_JSON = b'{"1": {"candidate_steps": [1, 3, 7]}}\r\n\xc3\xa9'  # CRLF, non-ASCII


@pytest.fixture(params=["existing", "absent"])
def original(request: pytest.FixtureRequest) -> bytes | None:
    return ORIGINAL_JSON if request.param == "existing" else None


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "autotune" in p.name)


def test_over_ssh_deploys_and_restores_companion_files(
    ssh_rig: SshRig, fake_host: FakeSystemdHost, original: bytes | None
) -> None:
    fake_host.install(UNIT, unit_text("original"))
    companion = fake_host.unit_dir / "sglang-adaptive.json"
    if original is not None:
        companion.write_bytes(original)
        companion.chmod(0o600)
    settings = fake_host.settings(UNIT, companion_files=(str(companion),))
    with ssh_deployer(ssh_rig.settings(), settings) as dep:
        dep.deploy(unit_text("trial-1"), {str(companion): '{"1": {"candidate_steps": [2]}}'})
        assert companion.read_text() == '{"1": {"candidate_steps": [2]}}'
        dep.deploy(unit_text("trial-2"), {str(companion): None})  # the builtin: no file
        assert not companion.exists()
        dep.deploy(unit_text("trial-3"), {str(companion): "{}"})
    # The daemon died here; a later `autotune restore` (another process) puts it back.
    with ssh_deployer(ssh_rig.settings(), settings) as dep:
        dep.restore()
    if original is None:
        assert not companion.exists()
    else:
        assert companion.read_bytes() == original
        assert companion.stat().st_mode & 0o777 == 0o600
    assert fake_host.unit_path(UNIT).read_text() == unit_text("original")
    with ssh_deployer(ssh_rig.settings(), settings) as dep:
        dep.forget_original()
    assert _leftovers(fake_host.unit_dir) == []


@pytest.fixture
def local_unit(tmp_path: Path) -> Iterator[Path]:
    unit = tmp_path / "server.service"
    unit.write_text("[Service]\nExecStart=/bin/sleep 30\n")
    yield unit


def test_locally_deploys_and_restores_companion_files(
    local_unit: Path, tmp_path: Path, original: bytes | None
) -> None:
    companion = tmp_path / "sglang-adaptive.json"
    if original is not None:
        companion.write_bytes(original)
    dep = LocalProcessDeployer(
        local_unit, log_dir=tmp_path / "logs", companion_files=[str(companion)]
    )
    try:
        dep.deploy(local_unit.read_text(), {str(companion): "[1]"})
        assert companion.read_text() == "[1]" and dep.is_running()
        dep.deploy(local_unit.read_text(), {str(companion): "[2]"})  # backed up once only
        dep.restore()
        if original is None:
            assert not companion.exists()
        else:
            assert companion.read_bytes() == original
        assert _leftovers(tmp_path) == []
        assert dep.is_running()  # the original unit serves again
    finally:
        dep.close()
    assert not dep.is_running()
