"""experiments/test_durations.py on a real pytest report: issue 46's before run, as pytest
wrote it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.e2e import REPO

SCRIPT = REPO / "experiments" / "test_durations.py"
REPORT = REPO / "experiments" / "results" / "raw" / "suite-before.txt"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )


def test_a_tests_phases_are_summed_and_the_folders_add_up(tmp_path: Path) -> None:
    weights = tmp_path / "w.json"
    proc = _run(str(REPORT), "--top", "3", "--weights", str(weights))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("Suite: 1003 passed, 14 warnings in 1990 s (33 min 10 s wall)")
    assert "over 1003 tests" in out
    lines = out.splitlines()
    assert sum(line.startswith(("| 1 |", "| 2 |", "| 3 |")) for line in lines) == 3
    assert sum(line.startswith("| `tests") for line in lines) == 8  # one row a folder
    # The adapter test's setup (its session fixture's vLLM start), call and teardown.
    assert "| 3 | 195.8 | `tests/vllm/test_real_vllm.py::test_the_adapter_reads" in out
    per_file = json.loads(weights.read_text())
    assert per_file["tests/vllm/test_real_vllm.py"] == pytest.approx(587.4, abs=0.1)
    folder_total = sum(
        float(line.rsplit("|", 2)[1])
        for line in out.splitlines()
        if line.endswith("|") and line.startswith("| `tests") and line.count("|") == 4
    )
    assert folder_total == pytest.approx(sum(per_file.values()), abs=5)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["/nonexistent/report.txt"], "cannot read"),
        ([str(SCRIPT)], "no durations lines"),
        ([str(REPORT), "--weights", "/nonexistent/dir/w.json"], "cannot write"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    proc = _run(*args)
    assert proc.returncode == 2
    assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
