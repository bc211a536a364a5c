"""The traps of a first night that `validate` must catch before anything is deployed,
through the real CLI: a mistyped speculative flag, a port another process holds, a
PostgreSQL URL whose connection is refused. Each is one line naming the file and the key."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.e2e import autotune, free_port, study_dir


def _errors(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stderr.splitlines() if "error" in line]


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("--speculative-num-step 3", "--speculative-num-steps"),  # argparse reads a prefix
        ("--speculative-eagle-tpok 1", "--speculative-eagle-topk"),  # two letters swapped
    ],
)
def test_a_mistyped_tuned_flag_is_refused_with_the_flag_it_nearly_spells(
    tmp_path: Path, typed: str, meant: str
) -> None:
    flags = f"{typed} --speculative-num-draft-tokens 4"
    config = study_dir(tmp_path, flags=flags)
    for command in ("validate", "start"):
        proc = autotune(command, "--config", str(config), cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr[-2000:]
        line = f"sim.service: ExecStart: {typed.split()[0]}: did you mean {meant}?"
        assert any(line in e for e in _errors(proc)), proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
        assert "deploying" not in proc.stderr  # refused before any model load


def test_validate_checks_the_port_of_a_local_server_as_start_does(tmp_path: Path) -> None:
    config = study_dir(tmp_path)
    port = int(config.read_text().split("127.0.0.1:")[1].split()[0].strip("'\""))
    other = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        proc = autotune("validate", "--config", str(config), cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr[-2000:]
        line = f"target.base_url: port {port} is held by pid {other.pid}"
        assert any(line in e for e in _errors(proc)), proc.stderr[-2000:]
    finally:
        other.terminate()
        other.wait(timeout=10)
    # Free again: the same check passes.
    proc = autotune("validate", "--config", str(config), cwd=tmp_path)
    assert "the port is free; autotune starts the server itself" in proc.stdout, proc.stdout


def test_a_refused_postgresql_connection_is_named_in_its_own_words(tmp_path: Path) -> None:
    config = study_dir(tmp_path)
    url = f"postgresql://someone@127.0.0.1:{free_port()}/nowhere"
    config.write_text(config.read_text().replace(f"sqlite:///{tmp_path / 'study.db'}", url))
    for command in ("status", "start", "validate"):
        proc = autotune(command, "--config", str(config), cwd=tmp_path)
        assert proc.returncode == 2, (command, proc.stderr[-2000:])
        said = [e for e in _errors(proc) if "study.storage" in e]
        assert said and "Connection refused" in said[0], (command, proc.stderr[-2000:])
        assert "exception is raised during the commit" not in proc.stderr


def test_a_level_above_the_units_cap_is_warned_about_by_validate_and_start(tmp_path: Path) -> None:
    flags = (
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
        "--max-running-requests 3"
    )
    config = study_dir(tmp_path, flags=flags, concurrency=[1, 4], n_trials=1)
    proc = autotune("validate", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = (
        "warning  levels: benchmark.concurrency: c=4 above the unit's --max-running-requests "
        "3: the server runs 3 at once and queues the rest"
    )
    assert line in proc.stdout, proc.stdout


def test_a_reader_that_leaves_early_gets_no_internal_error(tmp_path: Path) -> None:
    """`autotune status | head`: the pipe closes before autotune has written all; it ends
    quietly with a shell's code for SIGPIPE (128 + 13), not `internal error: BrokenPipeError`."""
    config = study_dir(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "validate", "--config", str(config)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141, err
    assert "internal error" not in err and "Traceback" not in err and "BrokenPipe" not in err, err
