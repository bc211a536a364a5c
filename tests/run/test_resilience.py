"""Overnight robustness with real processes: the daemon killed, signalled, doubled; faults injected.

The target is a stand-in systemd host driven through `deploy: local-systemd`, so
the server (the real simulator) outlives the daemon as it would under systemd.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.helpers.daemon import Daemon
from tests.helpers.e2e import autotune, free_port, sim_unit, status, study_dir
from tests.helpers.fake_systemd_host import FakeSystemdHost

pytestmark = pytest.mark.slow

UNIT = "sglang-sim.service"
BASE_FLAGS = "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"


@pytest.fixture
def host(tmp_path: Path) -> Iterator[FakeSystemdHost]:
    h = FakeSystemdHost(tmp_path / "host")
    yield h
    h.cleanup()


def _systemd_study(
    tmp: Path, host: FakeSystemdHost, *, n_trials: int, sim_flags: str = "--sim-load-time 0.2"
) -> tuple[Path, int]:
    port = free_port()
    host.install(UNIT, sim_unit(port, BASE_FLAGS, sim_flags))
    config = {
        "study": {
            "name": "overnight",
            "storage": f"sqlite:///{tmp / 'study.db'}",
            "n_trials": n_trials,
            "seed": 11,
            "startup_trials": 3,
        },
        "target": {
            "deploy": "local-systemd",
            "unit": UNIT,
            "unit_file": str(host.unit_path(UNIT)),
            "base_url": f"http://127.0.0.1:{port}",
            "ready_timeout": 60,
            "systemd": {
                "lock_file": str(host.root / "autotune.lock"),
                "systemctl": host.systemctl,
                "journalctl": host.journalctl,
                "restart_timeout_s": 30.0,
            },
        },
        "search_space": "sglang-mtp.yaml",
        "benchmark": {
            "concurrency": [1, 4],
            "max_tokens": 64,
            "min_duration": 0.5,  # the shortest: what survives a crash, not figures
            "max_duration": 1.0,
            "ci_width": None,
            "warmup_requests": 1,
            "finalists": 0,
        },
        "objective": {"constraints": {"min_running_requests": 4}},
    }
    path = tmp / "autotune.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path, port


def _served(port: int) -> dict[str, Any]:
    return httpx.get(f"http://127.0.0.1:{port}/get_server_info", timeout=10).json()


def _best(config: Path) -> dict[str, Any]:
    proc = autotune("best", "--json", "--config", str(config), cwd=config.parent)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _assert_serving_best(config: Path, port: int) -> None:
    best = _best(config)["resolved"]
    info = _served(port)
    assert {k: info[k] for k in best} == best


def test_kill_9_mid_benchmark_then_start_again(tmp_path: Path, host: FakeSystemdHost) -> None:
    config, port = _systemd_study(tmp_path, host, n_trials=4)
    daemon = Daemon("--config", str(config), cwd=tmp_path)
    try:
        daemon.wait_for("trial 2 of 4", "benchmarking")
    finally:
        daemon.kill()

    resumed = autotune("start", "--config", str(config), cwd=tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "recovered trials whose daemon died" in resumed.stderr

    trials = status(config)["trials"]
    states = [t["state"] for t in trials]
    assert states.count("COMPLETE") == 4
    assert "RUNNING" not in states
    killed = [t for t in trials if t["state"] == "FAIL"]
    assert len(killed) == 1 and killed[0]["failure"] == "daemon_died"
    # The killed trial's config was measured exactly once, by its retry.
    again = [
        t
        for t in trials
        if t["state"] == "COMPLETE"
        and t["params"] == killed[0]["params"]
        and t["reused_from"] is None
    ]
    assert len(again) == 1
    _assert_serving_best(config, port)

    # The morning after: the unit as it was, said once it answers (systemd keeps it).
    restored = autotune("restore", "--config", str(config), cwd=tmp_path, timeout=120)
    assert restored.returncode == 0, restored.stderr[-3000:]
    assert restored.stdout.strip().splitlines()[-1] == (
        f"serving the original {UNIT} at http://127.0.0.1:{port} (via local-systemd)"
    )
    assert _served(port)["speculative_num_steps"] == 3


def test_sigterm_during_a_level_exits_cleanly(tmp_path: Path, host: FakeSystemdHost) -> None:
    config, port = _systemd_study(tmp_path, host, n_trials=6)
    daemon = Daemon("--config", str(config), cwd=tmp_path)
    try:
        daemon.wait_for("trial 2 of 6", "benchmarking")
        daemon.signal(signal.SIGTERM)
        assert daemon.wait(timeout=120) == 0, daemon.log[-3000:]
    finally:
        daemon.kill()
    assert "stopping after the current benchmark level" in daemon.log
    assert "serving the best config" in daemon.log
    trials = status(config)["trials"]
    assert [t["state"] for t in trials[:2]] == ["COMPLETE", "FAIL"]
    assert trials[1]["failure"] == "interrupted"
    assert sum(t["state"] == "COMPLETE" for t in trials) == 1
    _assert_serving_best(config, port)

    # The interrupted config is queued again: the next start measures it first.
    resumed = autotune(
        "start", "--config", str(config), "--n-trials", "2", cwd=tmp_path, timeout=200
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    trials = status(config)["trials"]
    assert trials[2]["params"] == trials[1]["params"] and trials[2]["state"] == "COMPLETE"


def test_second_worker_on_the_same_host_is_refused(tmp_path: Path, host: FakeSystemdHost) -> None:
    # Workers of one study are welcome (tests/postgres/); two driving one host are not.
    config, _ = _systemd_study(tmp_path, host, n_trials=3)
    first = Daemon("--config", str(config), cwd=tmp_path)
    try:
        first.wait_for("trial 1 of 3")
        second = autotune("start", "--config", str(config), cwd=tmp_path, timeout=60)
        assert second.returncode == 1
        assert "another autotune is deploying to this host" in second.stderr
        assert str(first.proc.pid) in second.stderr
        assert "Traceback" not in second.stderr
        first.signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 0
    finally:
        first.kill()


@pytest.mark.parametrize(
    ("fault", "kind", "feasible"),
    [
        ("crash-on-start", "crash_on_start", False),
        ("hang-on-start", "not_ready", False),
        ("crash-after:3", "crash_during_benchmark", False),
        ("slow-start:3", None, True),
    ],
)
def test_simulator_faults_become_the_right_failure(
    tmp_path: Path, fault: str, kind: str | None, feasible: bool
) -> None:
    config = study_dir(tmp_path, n_trials=1, sim_flags=f"--sim-load-time 0.2 --sim-fault {fault}")
    data = yaml.safe_load(config.read_text())
    data["target"]["ready_timeout"] = 8
    config.write_text(yaml.safe_dump(data))
    proc = autotune("start", "--config", str(config), cwd=tmp_path, timeout=120)
    (trial,) = [t for t in status(config)["trials"] if t["state"] != "WAITING"]
    if feasible:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert trial["state"] == "COMPLETE" and trial["feasible"] is True
        return
    # The fault is in the unit as it is (trial 0): no other config is worth deploying until
    # it serves; the study stops with its reason, and nothing is recorded as infeasible.
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert ("your unit" in line and f"as it is: {kind}: " in line) or (
        f"as it is does not serve the benchmark: {kind}: " in line
    ), line
    assert trial["state"] == "FAIL" and trial["failure"] == "unit_does_not_serve"
    assert str(trial["reason"]).startswith(f"{kind}: ")


def _trial_attrs(config: Path) -> dict[str, Any]:
    import optuna

    data = yaml.safe_load(config.read_text())
    study = optuna.load_study(study_name=data["study"]["name"], storage=data["study"]["storage"])
    (trial,) = study.trials
    return trial.user_attrs


@pytest.mark.parametrize(
    ("fault", "confirmed"),
    [("crash-after:3", True), ("crash-once-after:3:{marker}", False)],
    ids=["crashes-every-time", "crashes-once"],
)
def test_a_crash_under_load_is_confirmed_by_one_redeploy(
    tmp_path: Path, fault: str, confirmed: bool
) -> None:
    marker = tmp_path / "crashed-once"
    flags = f"--sim-load-time 0.2 --sim-fault {fault.format(marker=marker)}"
    config = study_dir(tmp_path, n_trials=1, sim_flags=flags)
    proc = autotune("start", "--config", str(config), cwd=tmp_path, timeout=120)
    assert "deploying it once more" in proc.stderr
    (trial,) = [t for t in status(config)["trials"] if t["state"] != "WAITING"]
    if confirmed:
        # The unit as it is crashes under load every time: the study stops on trial 0.
        assert proc.returncode == 2, proc.stderr[-3000:]
        assert "your unit as it is does not serve the benchmark: crash_during_benchmark" in (
            proc.stderr
        )
        assert trial["state"] == "FAIL" and trial["failure"] == "unit_does_not_serve"
    else:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert trial["state"] == "COMPLETE" and trial["feasible"] is True
        attrs = _trial_attrs(config)
        assert attrs["crash_confirmed"] is False
        assert attrs["first_attempt"]["failure"] == "crash_during_benchmark"
        assert attrs["first_attempt"]["reason"]
        assert trial["failure"] is None and marker.exists()
        assert trial["value"] > 0
    # Both attempts' server logs are kept with the trial.
    files = [p for p in (tmp_path / "study-artifacts").rglob("*") if p.is_file()]
    assert any("first attempt: crashed" in p.read_text(errors="replace") for p in files), files
