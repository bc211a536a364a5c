"""What an operator reads on the first night, through the real CLI: the study keeps the
budget it was given, and a worker that died is shown as gone, not as measuring."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers.e2e import autotune, status, study_dir

pytestmark = pytest.mark.slow  # end-to-end studies: not in make test-fast


def _edit(config: Path, **sections: dict) -> None:
    data = yaml.safe_load(config.read_text())
    for name, values in sections.items():
        data[name].update(values)
    config.write_text(yaml.safe_dump(data, sort_keys=False))


def test_start_n_trials_is_the_studys_total_until_another_is_given(tmp_path: Path) -> None:
    config = study_dir(tmp_path, n_trials=4, concurrency=[1])
    first = autotune("start", "--config", str(config), "--n-trials", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    seen = status(config)
    assert (seen["finished"], seen["n_trials"]) == (1, 1)
    # A plain restart (tmux, the service's Restart=) keeps the study's total.
    again = autotune("start", "--config", str(config), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "budget spent: nothing to deploy" in again.stderr
    assert (status(config)["finished"], status(config)["n_trials"]) == (1, 1)
    text = autotune("status", "--config", str(config), cwd=tmp_path)
    assert "1 of 1 trials finished" in text.stdout, text.stdout
    more = autotune("start", "--config", str(config), "--n-trials", "2", cwd=tmp_path)
    assert more.returncode == 0, more.stderr[-3000:]
    assert (status(config)["finished"], status(config)["n_trials"]) == (2, 2)
    # A budget larger than the space: what is left is the configs no trial holds yet
    # (sglang-mtp.yaml has 8), not 30 deployments.
    big = autotune(
        "start", "--config", str(config), "--n-trials", "30", "--max-hours", "0.001", cwd=tmp_path
    )
    assert big.returncode == 0, big.stderr[-3000:]
    seen = status(config)
    finished = [t for t in seen["trials"] if t["state"] in ("COMPLETE", "PRUNED")]
    tried = {json.dumps(t["config"], sort_keys=True) for t in finished}
    assert seen["time"]["remaining"] == 8 - len(tried) < 30 - len(finished), seen["time"]
    assert seen["time"]["paused_since"] is not None
    # `best` in a person's units, with the gain over the unit as it was.
    best = autotune("best", "--config", str(config), cwd=tmp_path).stdout
    head = best.splitlines()[0]
    assert " tok/s (geomean of output tok/s over c=1)" in head, best
    assert "over the unit as it was (trial 0: " in head or "the unit as it was is the best" in head
    assert "output tok/s: c=1 " in best and "None" not in best and "[]" not in best, best
    assert "over deployments:" not in best and "spread: " in best  # said once, in words


def test_a_killed_worker_on_this_host_shows_as_stale_at_once_and_its_server_as_left(
    tmp_path: Path,
) -> None:
    # A model load that outlasts the test: the trial stays RUNNING while its worker beats.
    config = study_dir(tmp_path, n_trials=1, concurrency=[1], sim_flags="--sim-load-time 600")
    _edit(config, study={"heartbeat_grace": 5}, target={"ready_timeout": 900})  # beats every 1 s
    worker = subprocess.Popen(
        [sys.executable, "-m", "autotune", "start", "--config", str(config)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "AUTOTUNE_LOG_FORMAT": "console"},
        start_new_session=True,
    )
    port = int(yaml.safe_load(config.read_text())["target"]["base_url"].rsplit(":", 1)[1])
    try:
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, "the trial never ran"
            running = [w for w in _workers(config) if w["age_s"] is not None]
            if running:
                break
            time.sleep(0.5)
        assert running[0]["stale"] is False and running[0]["age_s"] < 3
        alive = autotune("status", "--config", str(config), cwd=tmp_path).stdout
        assert "alive, seen" in alive and "STALE" not in alive, alive
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=10)
        # Its pid is asked on this host: no wait for two missed beats (5 s of grace here).
        assert [w["stale"] for w in _workers(config)] == [True]
        shown = autotune("status", "--config", str(config), cwd=tmp_path).stdout
        assert "STALE, last seen" in shown and "its worker is gone" in shown, shown
        server = _loading_server(port)
        assert server is not None
        assert f"server: pid {server}, started by the worker that is gone, still runs" in shown
        assert "now:" not in shown, shown  # the dead worker's last line is not the present
        (row,) = [t for t in status(config)["trials"] if t["state"] == "RUNNING"]
        assert row["stale"] is True and row["progress"] is None
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
        # The server outlives its killed worker (its own session): found by its command.
        server_pid = _loading_server(port)
        if server_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server_pid, signal.SIGKILL)


def _workers(config: Path) -> list[dict]:
    proc = autotune("status", "--json", "--config", str(config), cwd=config.parent)
    if proc.returncode != 0:
        return []  # the study is not created yet
    return json.loads(proc.stdout)["workers"]


def _loading_server(port: int) -> int | None:
    """The simulated server's pid (its process group): it does not listen while it loads,
    so it is found as the child of the worker whose command names the port."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"autotune.sim" in b" ".join(argv) and str(port).encode() in argv:
            return int(proc.name)
    return None
