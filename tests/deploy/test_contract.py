"""The Deployer contract, one suite over every deployer (as Optuna runs one suite over every
storage): local-process (a child of autotune), local systemd (the stand-in systemctl through
the local runner) and systemd over a real SSH connection to a real sshd.

What a trial relies on, whatever the transport: the unit as the operator left it is read
back byte for byte and changed by nothing but `deploy`; `deploy` restarts the service on the
new unit and its companion files; the logs are this start's only; an exit is seen with its
code; `stop` stops; `restore` puts the unit and the files back and runs the original.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autotune.deploy.base import Deployer
from autotune.deploy.local_process import LocalProcessDeployer
from autotune.deploy.local_systemd import local_systemd_deployer
from autotune.deploy.ssh import ssh_deployer
from tests.deploy.conftest import SshRig, let_go
from tests.helpers.fake_systemd_host import FakeSystemdHost, unit_text

pytestmark = pytest.mark.slow

UNIT = "sglang-contract.service"
ORIGINAL = unit_text("original")
COMPANION = b'{"1": {"candidate_steps": [1, 3, 7]}}\r\n\xc3\xa9'  # CRLF, non-ASCII
#: The companion files a space's `file:` knobs name, as autotune builds each deployer with.
FILES = ("adaptive.json", "must-not-exist.json")


@pytest.fixture(params=["local-process", "local-systemd", "ssh"])
def deployer(request: pytest.FixtureRequest, world_dir: Path) -> Iterator[Deployer]:
    if request.param == "local-process":
        path = world_dir / UNIT
        path.write_text(ORIGINAL)
        dep = LocalProcessDeployer(
            path, log_dir=world_dir / "logs", companion_files=[str(world_dir / f) for f in FILES]
        )
        try:
            yield dep
        finally:
            let_go(dep)
        return
    host: FakeSystemdHost = request.getfixturevalue("fake_host")
    host.install(UNIT, ORIGINAL)
    settings = host.settings(UNIT, companion_files=tuple(str(world_dir / f) for f in FILES))
    if request.param == "local-systemd":
        with local_systemd_deployer(settings, sudo=False) as dep:
            yield dep
    else:
        rig: SshRig = request.getfixturevalue("ssh_rig")
        with ssh_deployer(rig.settings(), settings) as dep:
            yield dep


def _until(predicate: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _logs_with(dep: Deployer, text: str) -> str:
    _until(lambda: text in dep.logs(), f"{text!r} never in the logs: {dep.logs()[-500:]!r}")
    return dep.logs()


def test_it_is_a_deployer_and_reads_the_unit_back_byte_for_byte(deployer: Deployer) -> None:
    assert isinstance(deployer, Deployer)
    deployer.preflight()
    assert deployer.original_unit() == ORIGINAL


def test_deploy_restarts_on_the_new_unit_and_the_logs_are_this_starts(
    deployer: Deployer,
) -> None:
    deployer.original_unit()
    deployer.deploy(unit_text("trial-1"))
    assert "server original" not in _logs_with(deployer, "server trial-1")
    assert deployer.is_running() and deployer.exit_status() is None
    deployer.deploy(unit_text("trial-2"))
    assert "server trial-1" not in _logs_with(deployer, "server trial-2")
    # The unit read back is still the operator's, not the trial's.
    assert deployer.original_unit() == ORIGINAL


def test_an_exit_is_seen_with_its_code_and_stop_stops(deployer: Deployer) -> None:
    deployer.original_unit()
    deployer.deploy(unit_text("bad", "--exit-after", "0", "--code", "2"))
    _logs_with(deployer, "exiting with 2")
    _until(lambda: not deployer.is_running(), "the exited server still counts as running")
    assert deployer.exit_status() == 2
    deployer.deploy(unit_text("good"))
    _logs_with(deployer, "server good")
    assert deployer.is_running() and deployer.exit_status() is None
    deployer.stop()
    _until(lambda: not deployer.is_running(), "stop left the server running")


@pytest.mark.parametrize("before", ["existing", "absent"])
def test_companion_files_are_written_and_restore_puts_everything_back(
    deployer: Deployer, world_dir: Path, before: str
) -> None:
    companion, forbidden = (world_dir / f for f in FILES)
    if before == "existing":
        companion.write_bytes(COMPANION)
    deployer.original_unit()
    deployer.deploy(unit_text("trial-1"), {str(companion): "trial", str(forbidden): None})
    _logs_with(deployer, "server trial-1")
    assert companion.read_text() == "trial"
    assert not forbidden.exists()
    deployer.restore()
    assert deployer.original_unit() == ORIGINAL
    if before == "existing":
        assert companion.read_bytes() == COMPANION
    else:
        assert not companion.exists()
    _logs_with(deployer, "server original")
    assert deployer.is_running()
