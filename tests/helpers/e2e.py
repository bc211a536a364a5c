"""Helpers for end-to-end tests: a study directory with a unit that runs the real simulator."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

# Shared with the experiments, so they live in testservers/; the tests take them from here.
from autotune.testservers.ports import free_port as free_port
from autotune.testservers.sim_unit import sim_unit as sim_unit

REPO = Path(__file__).resolve().parents[2]


def study_dir(
    tmp: Path,
    *,
    space: str | dict[str, Any] = "sglang-mtp.yaml",
    n_trials: int = 4,
    flags: str = "--speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4",
    sim_flags: str = "--sim-load-time 0.2",
    concurrency: list[int] | None = None,
    objective: dict[str, Any] | None = None,
    sampler: str = "auto",
    finalists: int = 0,
) -> Path:
    port = free_port()
    (tmp / "sim.service").write_text(sim_unit(port, flags, sim_flags))
    config = {
        "study": {
            "name": "e2e",
            "storage": f"sqlite:///{tmp / 'study.db'}",
            "n_trials": n_trials,
            "seed": 3,
            "sampler": sampler,
        },
        "target": {
            "unit_file": "sim.service",
            "base_url": f"http://127.0.0.1:{port}",
            "ready_timeout": 60,
        },
        "search_space": space,
        "benchmark": {
            "concurrency": concurrency or [1, 4],
            "workload": "natural",
            "max_tokens": 64,
            # The shortest windows the config takes, no confidence target: these studies check
            # what a study does, not figures (test_study_e2e's confidence test sets its own).
            "min_duration": 0.5,
            "max_duration": 1.0,
            "ci_width": None,
            "warmup_requests": 1,
            "finalists": finalists,
            "load_phase_segment": 2,  # the finalists' changing-load phase: 2 s per level
        },
        "objective": objective or {"constraints": {"min_running_requests": 4}},
    }
    path = tmp / "autotune.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def autotune(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AUTOTUNE_LOG_FORMAT": "console"}
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def status(config: Path) -> dict[str, Any]:
    proc = autotune("status", "--json", "--config", str(config), cwd=config.parent)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """Stop a process this test started, by its PID (and its process group: Chromium forks)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def wait_http(
    url: str, proc: subprocess.Popen[Any], timeout: float = 30, log: Path | None = None
) -> None:
    """Until `url` answers 200; fails if `proc` exits first (with the tail of its `log`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log is not None else ""
            raise AssertionError(f"{proc.args} exited\n{tail}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} never answered")
