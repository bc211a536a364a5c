"""A server that listens only on the GPU host's loopback, benchmarked through the SSH link:
real sshd on 127.0.0.1, the stand-in systemd, the real simulator, no `--host` in the unit."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from autotune.deploy.ssh_runner import SSHRunner
from autotune.deploy.tunnel import Tunnel
from tests.deploy.conftest import SshRig
from tests.deploy.test_study_ssh import UNIT, _config
from tests.helpers.daemon import Daemon
from tests.helpers.e2e import autotune, free_port, sim_unit, status
from tests.helpers.fake_systemd_host import FakeSystemdHost

pytestmark = pytest.mark.slow

CHAIN = "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"


def _loopback_unit(port: int, sim_flags: str = "--sim-load-time 0.2") -> str:
    unit = sim_unit(port, CHAIN, sim_flags).replace("--host 127.0.0.1 ", "")
    assert "--host" not in unit  # the server's own default: 127.0.0.1 only
    return unit


def _study(
    world_dir: Path, host: FakeSystemdHost, rig: SshRig, **benchmark: float
) -> tuple[Path, int]:
    """A 3-trial study of a unit with no --host, its config without base_url; the port."""
    port = free_port()
    host.install(UNIT, _loopback_unit(port))
    config = _config(world_dir, rig, host, port, n_trials=3)
    data = yaml.safe_load(config.read_text())
    del data["target"]["base_url"]
    data["benchmark"].update(benchmark)
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    return config, port


def test_a_study_reaches_a_loopback_server_through_the_ssh_link(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    config, port = _study(world_dir, fake_host, ssh_rig)
    checked = autotune("validate", "--config", str(config), cwd=world_dir, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    server = [line for line in checked.stdout.splitlines() if line.startswith("ok  server:")]
    assert server and "through the SSH link" in server[0], checked.stdout
    assert f"127.0.0.1:{port} on the host" in server[0]

    proc = autotune("start", "--config", str(config), cwd=world_dir, timeout=400)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "the benchmark reaches the server through the SSH link" in proc.stderr
    trials = status(config)["trials"]
    assert len(trials) == 3 and all(t["state"] in ("COMPLETE", "PRUNED") for t in trials)
    assert all(t["feasible"] is not False for t in trials), trials
    assert "--host" not in fake_host.unit_path(UNIT).read_text()  # the unit stays as it was


def test_a_link_cut_during_a_level_is_the_hosts_failure_not_the_configs(
    world_dir: Path, fake_host: FakeSystemdHost, ssh_rig: SshRig
) -> None:
    config, _ = _study(world_dir, fake_host, ssh_rig, min_duration=2.0, max_duration=2.0)
    daemon = Daemon("--config", str(config), cwd=world_dir)
    try:
        daemon.wait_for("trial 2 of 3", "benchmarking", timeout=200)
        for pid in ssh_rig.server.connection_pids():  # every session of the link: it drops
            os.kill(pid, signal.SIGKILL)
        assert daemon.wait(timeout=300) == 0, daemon.log[-4000:]
    finally:
        daemon.kill()
    assert "tunnel.cut" in daemon.log, daemon.log[-4000:]
    trials = status(config)["trials"]
    failed = [t for t in trials if t["state"] == "FAIL"]
    assert [t["failure"] for t in failed] == ["infrastructure"], trials
    assert "the SSH link cut" in failed[0]["reason"]
    done = [t for t in trials if t["state"] in ("COMPLETE", "PRUNED")]
    assert len(done) == 3 and all(t["failure"] in (None, "") for t in done), done
    assert any(t["params"] == failed[0]["params"] for t in done)  # measured again


def test_the_local_end_is_a_free_port_and_reconnects_after_a_drop(ssh_rig: SshRig) -> None:
    """A port already bound on the tuner's side is never asked for; a drop is counted and
    the next connection goes through a new link."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]

        def answer() -> None:
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                conn.close()

        threading.Thread(target=answer, daemon=True).start()
        runner = SSHRunner(ssh_rig.settings())
        tunnel = Tunnel(runner, port)
        try:
            first = tunnel.open()
            assert first != port
            mark = tunnel.mark()
            assert httpx.get(f"http://127.0.0.1:{first}/", timeout=10).text == "ok"
            assert tunnel.broken_since(mark) is None
            for pid in ssh_rig.server.connection_pids():
                os.kill(pid, signal.SIGKILL)
            # A connection the dying link takes is cut (the client sees it closed); the next
            # one reconnects.
            answers = []
            for _ in range(3):
                try:
                    answers.append(httpx.get(f"http://127.0.0.1:{first}/", timeout=30).text)
                    break
                except httpx.TransportError:
                    time.sleep(0.5)
            assert answers == ["ok"]
            assert tunnel.open() == first  # the same local end, over the new link
        finally:
            tunnel.close()
            runner.close()
