"""The systemd deployer over a real SSH connection, against the stand-in systemctl/journalctl."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autotune.deploy.base import Deployer
from autotune.deploy.ssh import ssh_deployer
from autotune.deploy.systemd import SystemdDeployer
from autotune.errors import DeployError
from tests.deploy.conftest import SshRig
from tests.helpers.fake_systemd_host import FakeSystemdHost, server_exec_start, unit_text

UNIT = "sglang-test.service"
# No trailing newline, non-ASCII, CRLF and a tab: restore must give these bytes back.
ORIGINAL = unit_text("original").replace("test server", "réseau\tserver\r") + "# end"


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


@pytest.fixture
def deployer(ssh_rig: SshRig, fake_host: FakeSystemdHost) -> Iterator[SystemdDeployer]:
    fake_host.install(UNIT, ORIGINAL)
    with ssh_deployer(ssh_rig.settings(), fake_host.settings(UNIT)) as dep:
        yield dep


def _mutations(host: FakeSystemdHost) -> list[list[str]]:
    return [c for c in host.calls() if c[0] not in ("show", "is-active")]


def test_is_a_deployer(deployer: SystemdDeployer) -> None:
    assert isinstance(deployer, Deployer)
    assert deployer.description == f"{UNIT} via ssh root@127.0.0.1:{deployer._runner.settings.port}"  # type: ignore[attr-defined]


def test_preflight_checks_and_changes_nothing(
    deployer: SystemdDeployer, fake_host: FakeSystemdHost
) -> None:
    before_calls = len(fake_host.calls())
    files_before = sorted(p.name for p in fake_host.root.rglob("*"))
    deployer.preflight()
    assert [c[0] for c in fake_host.calls()[before_calls:]] == ["show"]
    assert sorted(p.name for p in fake_host.root.rglob("*")) == files_before
    assert fake_host.unit_path(UNIT).read_bytes() == ORIGINAL.encode()


def test_preflight_reports_a_missing_unit_file(ssh_rig: SshRig, fake_host: FakeSystemdHost) -> None:
    with (
        ssh_deployer(ssh_rig.settings(), fake_host.settings(UNIT)) as dep,
        pytest.raises(DeployError, match=f"unit file .*{UNIT} does not exist"),
    ):
        dep.preflight()


def test_preflight_reports_a_unit_loaded_from_elsewhere(
    ssh_rig: SshRig, fake_host: FakeSystemdHost, tmp_path: Path
) -> None:
    fake_host.install(UNIT, ORIGINAL)
    elsewhere = fake_host.root / "copy.service"
    elsewhere.write_text(ORIGINAL)
    settings = fake_host.settings(UNIT, unit_file=str(elsewhere))
    with (
        ssh_deployer(ssh_rig.settings(), settings) as dep,
        pytest.raises(
            DeployError,
            match=r"systemd loads .* from .*units/sglang-test.service, not .*copy.service",
        ),
    ):
        dep.preflight()


@pytest.mark.slow
def test_deploy_reloads_restarts_and_reports_this_start(
    deployer: SystemdDeployer, fake_host: FakeSystemdHost
) -> None:
    assert deployer.original_unit() == ORIGINAL
    deployer.deploy(unit_text("trial-1"))
    assert fake_host.unit_path(UNIT).read_text() == unit_text("trial-1")
    wait_for(lambda: "server trial-1" in deployer.logs())
    assert deployer.is_running() and deployer.exit_status() is None

    start = len(fake_host.calls())
    deployer.deploy(unit_text("trial-2"))
    verbs = [c[0] for c in fake_host.calls()[start:]]
    # Always reloaded before the restart: systemd would otherwise run trial-1 again.
    assert verbs.index("daemon-reload") < verbs.index("restart")
    wait_for(lambda: "server trial-2" in deployer.logs())
    # Only this start's log: nothing of the original or of trial-1.
    assert "trial-1" not in deployer.logs() and "original" not in deployer.logs()


def test_a_server_that_fails_is_reported_not_raised(
    deployer: SystemdDeployer, fake_host: FakeSystemdHost
) -> None:
    deployer.deploy(unit_text("oom", "--exit-after", "0.1", "--code", "3"))
    wait_for(lambda: not deployer.is_running())
    assert deployer.exit_status() == 3
    assert "server oom exiting with 3" in deployer.logs()


def test_a_missing_binary_is_the_configs_failure_too(deployer: SystemdDeployer) -> None:
    # systemd's 203/EXEC: the unit started and failed; not a transport problem.
    broken = ORIGINAL.replace(server_exec_start("original"), "/nonexistent/sglang --port 1")
    deployer.deploy(broken)
    wait_for(lambda: not deployer.is_running())
    assert deployer.exit_status() == 203
    assert "Failed to execute" in deployer.logs()


def test_server_killed_by_a_signal_reads_128_plus_n(
    deployer: SystemdDeployer, fake_host: FakeSystemdHost
) -> None:
    deployer.deploy(unit_text("victim"))
    wait_for(deployer.is_running)
    os.kill(fake_host.runtime(UNIT)["MainPID"], 9)
    wait_for(lambda: not deployer.is_running())
    assert deployer.exit_status() == 128 + 9


@pytest.mark.slow
def test_original_backed_up_once_even_across_deployers(
    ssh_rig: SshRig, deployer: SystemdDeployer, fake_host: FakeSystemdHost
) -> None:
    backup = Path(fake_host.settings(UNIT).resolved_backup_file)
    original_bytes = fake_host.unit_path(UNIT).read_bytes()
    deployer.deploy(unit_text("trial-1"))
    assert backup.read_bytes() == original_bytes
    deployer.close()
    # A resumed study (a new deployer, as after a daemon restart) keeps the same
    # backup, although the unit on disk is a trial's by now.
    with ssh_deployer(ssh_rig.settings(), fake_host.settings(UNIT)) as resumed:
        assert resumed.original_unit() == ORIGINAL
        resumed.deploy(unit_text("trial-2"))
        assert backup.read_bytes() == original_bytes


@pytest.mark.slow
def test_restore_is_byte_identical_and_the_backup_kept_until_forgotten(
    deployer: SystemdDeployer, fake_host: FakeSystemdHost
) -> None:
    backup = Path(fake_host.settings(UNIT).resolved_backup_file)
    original_bytes = fake_host.unit_path(UNIT).read_bytes()
    fake_host.unit_path(UNIT).chmod(0o640)
    deployer.deploy(unit_text("trial-1"))
    deployer.restore()
    assert fake_host.unit_path(UNIT).read_bytes() == original_bytes
    assert fake_host.unit_path(UNIT).stat().st_mode & 0o777 == 0o640
    wait_for(lambda: "server original" in deployer.logs())
    assert deployer.is_running()
    assert backup.exists()  # kept until the study is over
    deployer.forget_original()
    assert not backup.exists()


def test_restore_without_backup_only_makes_sure_it_runs(
    deployer: SystemdDeployer, fake_host: FakeSystemdHost
) -> None:
    fake_host.systemctl_run("stop", UNIT)
    deployer.restore()
    assert fake_host.unit_path(UNIT).read_bytes() == ORIGINAL.encode()
    assert deployer.is_running()
    assert "restart" not in [c[0] for c in _mutations(fake_host)]


def test_unit_write_is_atomic_with_the_temporary_file_beside_it(
    deployer: SystemdDeployer, fake_host: FakeSystemdHost
) -> None:
    deployer.original_unit()
    big = [unit_text(f"v{i}") + "#" * 3_000_000 + "\n" for i in range(2)]
    seen_texts: set[bytes] = set()
    seen_names: set[str] = set()
    stop = threading.Event()
    path = fake_host.unit_path(UNIT)

    def watch() -> None:
        while not stop.is_set():
            seen_names.update(os.listdir(fake_host.unit_dir))
            seen_texts.add(path.read_bytes())

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for text in big * 2:
            deployer._files.write_atomic(str(path), text.encode())
    finally:
        stop.set()
        watcher.join()
    # Every read saw a whole file: the original or one of the versions, never a part.
    allowed = {ORIGINAL.encode(), *(t.encode() for t in big)}
    assert seen_texts <= allowed
    temporaries = {n for n in seen_names if re.fullmatch(rf"\.{UNIT}\.autotune-\w+", n)}
    assert temporaries, "the temporary file was not created in the unit's directory"
    assert not [n for n in os.listdir(fake_host.unit_dir) if n.startswith(".")]


def test_disk_full_is_a_deploy_error_and_leaves_the_unit_alone(
    ssh_rig: SshRig, fake_host: FakeSystemdHost
) -> None:
    small = fake_host.root / "small"
    small.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(small)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        unit_file = small / UNIT
        unit_file.write_text(ORIGINAL)
        settings = fake_host.settings(UNIT, unit_file=str(unit_file))
        with ssh_deployer(ssh_rig.settings(), settings) as dep:
            dep.original_unit()
            with pytest.raises(DeployError, match="No space left on device"):
                dep.deploy(ORIGINAL + "#" * 200_000)
        assert unit_file.read_bytes() == ORIGINAL.encode()
        assert sorted(os.listdir(small)) == [UNIT, f"{UNIT}.autotune-orig"]
    finally:
        subprocess.run(["umount", str(small)], check=False)


@pytest.mark.slow
def test_second_deployer_on_the_host_is_refused_naming_the_holder(
    ssh_rig: SshRig, deployer: SystemdDeployer, fake_host: FakeSystemdHost
) -> None:
    deployer.deploy(unit_text("trial-1"))
    with ssh_deployer(ssh_rig.settings(), fake_host.settings(UNIT)) as rival:
        pid = os.getpid()
        pattern = rf"is held by \S+@\S+ pid {pid} since \d{{4}}-\d\d-\d\dT[\d:]+.*another autotune"
        with pytest.raises(DeployError, match=pattern):
            rival.preflight()
        with pytest.raises(DeployError, match=pattern):
            rival.deploy(unit_text("rival"))
        assert "rival" not in fake_host.unit_path(UNIT).read_text()
        deployer.close()
        rival.deploy(unit_text("rival"))  # free once the first one is gone
        assert "rival" in fake_host.unit_path(UNIT).read_text()


def test_stop_stops(deployer: SystemdDeployer) -> None:
    deployer.deploy(unit_text("trial-1"))
    deployer.stop()
    assert not deployer.is_running()


@pytest.mark.slow
def test_gpu_wait_before_start(ssh_rig: SshRig, fake_host: FakeSystemdHost) -> None:
    fake_host.install(UNIT, ORIGINAL)
    fake_host.set_gpu_busy(4)
    gpu = fake_host.gpu_wait(poll_s=0.05)
    with ssh_deployer(ssh_rig.settings(), fake_host.settings(UNIT), gpu) as dep:
        start = len(fake_host.calls())
        dep.deploy(unit_text("after-gpu"))
        assert (fake_host.state / "gpu_busy_calls").read_text().strip() == "0"
        verbs = [c[0] for c in fake_host.calls()[start:] if c[0] != "show"]
        assert verbs == ["daemon-reload", "reset-failed", "stop", "start"]
        wait_for(lambda: "server after-gpu" in dep.logs())


@pytest.mark.slow
def test_gpu_wait_timeout_stops_a_deploy_but_not_a_restore(
    ssh_rig: SshRig, fake_host: FakeSystemdHost
) -> None:
    fake_host.install(UNIT, ORIGINAL)
    gpu = fake_host.gpu_wait(timeout_s=0.3, poll_s=0.05)
    with ssh_deployer(ssh_rig.settings(), fake_host.settings(UNIT), gpu) as dep:
        fake_host.set_gpu_busy(1000)
        with pytest.raises(DeployError, match=r"GPUs on .* still busy after 0 s .4242, 39000 MiB"):
            dep.deploy(unit_text("never"))
        dep.restore()  # the service must come back even on busy GPUs
        wait_for(lambda: "server original" in dep.logs())
        assert dep.is_running()


@pytest.mark.slow
def test_log_file_mode_reads_from_the_offset_of_this_start(
    ssh_rig: SshRig, fake_host: FakeSystemdHost
) -> None:
    log_file = fake_host.root / "server.log"
    log_file.write_text("old line from a previous start\n")

    def unit(name: str) -> str:
        return unit_text(name, "--log-file", str(log_file))

    fake_host.install(UNIT, unit("original"))
    settings = fake_host.settings(UNIT, log_file=str(log_file))
    with ssh_deployer(ssh_rig.settings(), settings) as dep:
        dep.deploy(unit("trial-1"))
        wait_for(lambda: "server trial-1" in dep.logs())
        dep.deploy(unit("trial-2"))
        wait_for(lambda: "server trial-2" in dep.logs())
        text = dep.logs()
        assert "trial-1" not in text and "old line" not in text and "original" not in text


@pytest.mark.slow
def test_paths_and_values_cannot_inject_shell(ssh_rig: SshRig, world_dir: Path) -> None:
    canary = world_dir / "pwned"
    evil = f'it\'s a "dir"; touch {canary} $(touch {canary}) `touch {canary}` & x'
    host = FakeSystemdHost(world_dir / "evil host", unit_dir_name=evil)
    try:
        flag = f"a b'c\"; touch {canary}; $(touch {canary})"
        text = unit_text("x", "--lines", "1").replace("--name x", "--name " + _systemd_quote(flag))
        host.install(UNIT, text)
        settings = host.settings(UNIT, lock_file=str(host.root / f"{evil}.lock"))
        with ssh_deployer(ssh_rig.settings(), settings) as dep:
            dep.preflight()
            assert dep.original_unit() == text
            dep.deploy(text.replace("--lines 1", "--lines 2"))
            wait_for(lambda: f"server {flag} line 1" in dep.logs())
            dep.restore()
            assert host.unit_path(UNIT).read_text() == text
        assert (host.unit_dir / f"{UNIT}.autotune-orig").read_text() == text
    finally:
        host.cleanup()
    assert not canary.exists(), "a path or flag value was run as a shell command"


def _systemd_quote(value: str) -> str:
    # systemd (and the stand-in) split ExecStart like a POSIX shell.
    import shlex

    return shlex.quote(value)
