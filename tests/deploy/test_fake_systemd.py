"""The stand-in systemctl behaves like systemd where the deployer's correctness depends on it."""

from __future__ import annotations

import time

from tests.helpers.fake_systemd_host import FakeSystemdHost, unit_text


def _wait_for(predicate, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def _show(host: FakeSystemdHost, unit: str) -> dict[str, str]:
    out = host.systemctl_run("show", unit).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def _journal(host: FakeSystemdHost, unit: str) -> str:
    invocation = _show(host, unit)["InvocationID"]
    argv = [host.journalctl, f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "-q"]
    import subprocess

    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def test_restart_without_daemon_reload_runs_the_old_unit(fake_host: FakeSystemdHost) -> None:
    unit = "demo.service"
    fake_host.install(unit, unit_text("old"))
    fake_host.write_unit(unit, unit_text("new"))
    assert _show(fake_host, unit)["NeedDaemonReload"] == "yes"

    restarted = fake_host.systemctl_run("restart", unit)
    assert restarted.returncode == 0
    assert "daemon-reload" in restarted.stderr  # systemd's own warning
    _wait_for(lambda: "server" in _journal(fake_host, unit))
    assert "server old" in _journal(fake_host, unit)

    assert fake_host.systemctl_run("daemon-reload").returncode == 0
    assert _show(fake_host, unit)["NeedDaemonReload"] == "no"
    assert fake_host.systemctl_run("restart", unit).returncode == 0
    _wait_for(lambda: "server" in _journal(fake_host, unit))
    assert "server new" in _journal(fake_host, unit)


def test_exit_code_and_states_like_systemd(fake_host: FakeSystemdHost) -> None:
    unit = "crash.service"
    fake_host.install(unit, unit_text("c", "--exit-after", "0", "--code", "3"))
    _wait_for(lambda: _show(fake_host, unit)["ActiveState"] == "failed")
    state = _show(fake_host, unit)
    assert (state["ExecMainCode"], state["ExecMainStatus"], state["MainPID"]) == ("1", "3", "0")
    assert state["Result"] == "exit-code"
    assert fake_host.systemctl_run("is-active", unit).returncode == 3

    assert fake_host.systemctl_run("reset-failed", unit).returncode == 0
    assert _show(fake_host, unit)["ActiveState"] == "inactive"


def test_stop_with_sigterm_is_clean(fake_host: FakeSystemdHost) -> None:
    unit = "run.service"
    fake_host.install(unit, unit_text("r"))
    first = _show(fake_host, unit)
    assert first["ActiveState"] == "active" and first["MainPID"] != "0"
    assert fake_host.systemctl_run("stop", unit).returncode == 0
    state = _show(fake_host, unit)
    assert (state["ActiveState"], state["ExecMainCode"], state["ExecMainStatus"]) == (
        "inactive",
        "2",
        "15",
    )


def test_unknown_unit(fake_host: FakeSystemdHost) -> None:
    result = fake_host.systemctl_run("restart", "nope.service")
    assert result.returncode == 5 and "not found" in result.stderr
    assert _show(fake_host, "nope.service")["LoadState"] == "not-found"
