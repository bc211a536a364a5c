"""A whole study over real SSH: sshd on 127.0.0.1, the stand-in systemd, the real simulator."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
import yaml

from autotune.unit import unitfile
from tests.deploy.conftest import SshRig
from tests.helpers.daemon import Daemon
from tests.helpers.e2e import autotune, free_port, sim_unit, status
from tests.helpers.fake_systemd_host import FakeSystemdHost

pytestmark = pytest.mark.slow

UNIT = "sglang-sim.service"


def _config(tmp: Path, rig: SshRig, host: FakeSystemdHost, port: int, n_trials: int) -> Path:
    config = {
        "study": {
            "name": "ssh-e2e",
            "storage": f"sqlite:///{tmp / 'study.db'}",
            "n_trials": n_trials,
            "seed": 5,
            "startup_trials": 3,
        },
        "target": {
            "deploy": "ssh",
            "unit": UNIT,
            "unit_file": str(host.unit_path(UNIT)),
            "base_url": f"http://127.0.0.1:{port}",
            "ready_timeout": 60,
            "ssh": rig.target_ssh(),
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
            "min_duration": 0.5,  # the shortest: a study through sshd, not its figures
            "max_duration": 1.0,
            "ci_width": None,
            "warmup_requests": 1,
            "finalists": 0,
        },
        "objective": {"constraints": {"min_running_requests": 4}},
    }
    path = tmp / "autotune.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _served_steps(port: int) -> int:
    info = httpx.get(f"http://127.0.0.1:{port}/get_server_info", timeout=10).json()
    return int(info["speculative_num_steps"])


def test_study_over_ssh_leaves_best_serving_and_restore_is_byte_identical(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    port = free_port()
    original = sim_unit(
        port,
        "--speculative-num-steps 4 --speculative-eagle-topk 1 --speculative-num-draft-tokens 5",
    )
    fake_host.install(UNIT, original)
    config = _config(world_dir, ssh_rig, fake_host, port, n_trials=6)

    proc = autotune("start", "--config", str(config), cwd=world_dir, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    trials = status(config)["trials"]
    assert len(trials) == 6
    # Finished: measured in full, or stopped after a level it could not win from.
    assert all(t["state"] in ("COMPLETE", "PRUNED") for t in trials)

    best = json.loads(autotune("best", "--json", "--config", str(config), cwd=world_dir).stdout)
    deployed = fake_host.unit_path(UNIT).read_text()
    flags = unitfile.parse_exec_start(deployed).flags()
    assert int(flags["--speculative-num-steps"]) == best["resolved"]["speculative_num_steps"]
    assert _served_steps(port) == best["resolved"]["speculative_num_steps"]
    assert "serving the best config" in proc.stderr

    restored = autotune("restore", "--config", str(config), cwd=world_dir, timeout=200)
    assert restored.returncode == 0, restored.stderr[-3000:]
    assert fake_host.unit_path(UNIT).read_bytes() == original.encode()
    assert _served_steps(port) == 4
    assert restored.stdout.strip().splitlines()[-1] == (
        f"serving the original {UNIT} at http://127.0.0.1:{port} (via ssh)"
    )


def test_ssh_link_down_longer_than_a_trial_consumes_no_trial(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    port = free_port()
    fake_host.install(
        UNIT,
        sim_unit(
            port,
            "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
        ),
    )
    config = _config(world_dir, ssh_rig, fake_host, port, n_trials=4)
    data = yaml.safe_load(config.read_text())
    data["target"]["ssh"]["reconnect_timeout_s"] = 3.0
    config.write_text(yaml.safe_dump(data, sort_keys=False))

    daemon = Daemon("--config", str(config), cwd=world_dir)
    try:
        daemon.wait_for("trial 2 of 4", "benchmarking", timeout=200)
        ssh_rig.server.stop()
        daemon.wait_for("waiting for the host", timeout=120)
        time.sleep(3)  # down for longer than the client's own reconnect budget
        ssh_rig.server.start()
        assert daemon.wait(timeout=300) == 0, daemon.log[-4000:]
    finally:
        daemon.kill()
    assert "target reachable again" in daemon.log
    trials = status(config)["trials"]
    complete = [t for t in trials if t["state"] == "COMPLETE"]
    assert len(complete) == 4
    assert all(t["failure"] != "infrastructure" for t in complete)
    failed = [t for t in trials if t["state"] == "FAIL"]
    assert failed and all(t["failure"] == "infrastructure" for t in failed)
    # The config whose trial the outage cut short was measured afterwards.
    assert any(t["params"] == failed[0]["params"] for t in complete)
    best = json.loads(autotune("best", "--json", "--config", str(config), cwd=world_dir).stdout)
    assert _served_steps(port) == best["resolved"]["speculative_num_steps"]


def test_a_stale_server_on_the_port_is_not_measured(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    import subprocess
    import sys

    from tests.helpers.e2e import stop_process, wait_http

    port = free_port()
    # The unit's server loads for 5 s before it binds (and fails to: the port is taken),
    # while a server started outside the unit answers at once.
    fake_host.install(UNIT, sim_unit(port, sim_flags="--sim-load-time 5"))
    config = _config(world_dir, ssh_rig, fake_host, port, n_trials=1)
    stale = subprocess.Popen(
        [sys.executable, "-m", "autotune.sim", "--port", str(port), "--sim-load-time", "0.2",
         "--speculative-algorithm", "EAGLE"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/health", stale)
        proc = autotune("start", "--config", str(config), cwd=world_dir, timeout=200)
        assert proc.returncode == 3, proc.stderr[-4000:]
        line = proc.stderr.strip().splitlines()[-1]
        assert f"is answered by pid {stale.pid} (" in line and "[not_ours]" in line, line
        assert "server ready" not in proc.stderr
        trials = status(config)["trials"]
        assert [t["failure"] for t in trials if t["state"] == "FAIL"] == ["host_failure"]
        assert not [t for t in trials if t["feasible"] is False]
    finally:
        stop_process(stale)
