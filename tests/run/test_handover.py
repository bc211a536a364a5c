"""What autotune leaves serving when it lets go of the server, said only once it answers.

`restore`, `apply` and the end of `start` print one line, `serving ... at URL (...)`, after
the deployer has let go: a local child keeps running (its pid and how to stop it are in the
line) and the address answers. Local systemd and SSH are covered beside their own studies
(tests/run/test_resilience.py, tests/deploy/test_study_ssh.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from pathlib import Path

import httpx
import pytest
import yaml

from tests.helpers.e2e import autotune, study_dir

pytestmark = pytest.mark.slow

SERVING = re.compile(r"^serving (.+) at (\S+) \(a local process, pid (\d+): `kill \3` stops it\)$")


def _serving(stdout: str) -> tuple[str, str, int]:
    last = stdout.strip().splitlines()[-1]
    m = SERVING.match(last)
    assert m, stdout
    return m[1], m[2], int(m[3])


def _steps(url: str) -> int:
    return int(httpx.get(f"{url}/get_server_info", timeout=10).json()["speculative_num_steps"])


def _stop(pid: int) -> None:
    """The server autotune left running: this test started it through autotune, by its pid."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)


def test_start_apply_and_restore_each_leave_a_local_server_that_answers(tmp_path: Path) -> None:
    config = study_dir(tmp_path, n_trials=3)
    data = yaml.safe_load(config.read_text())
    data["study"]["on_finish"] = "apply-best"
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    pids: list[int] = []
    try:
        start = autotune("start", "--config", str(config), cwd=tmp_path)
        assert start.returncode == 0, start.stderr[-3000:]
        what, url, pid = _serving(start.stdout)
        pids.append(pid)
        assert what.startswith("the best config, trial ")
        assert url == data["target"]["base_url"]
        httpx.get(f"{url}/health", timeout=10).raise_for_status()

        applied = autotune("apply", "--trial", "1", "--config", str(config), cwd=tmp_path)
        assert applied.returncode == 0, applied.stderr[-3000:]
        what, url, pid = _serving(applied.stdout)
        pids.append(pid)
        assert what == "trial 1's config"
        httpx.get(f"{url}/health", timeout=10).raise_for_status()

        restored = autotune("restore", "--config", str(config), cwd=tmp_path)
        assert restored.returncode == 0, restored.stderr[-3000:]
        what, url, pid = _serving(restored.stdout)
        pids.append(pid)
        assert what == "the original sim.service"
        # The unit as it was: steps 3 (tests/helpers/e2e.py's study_dir), answering after exit.
        assert _steps(url) == 3
    finally:
        for pid in pids:
            _stop(pid)
