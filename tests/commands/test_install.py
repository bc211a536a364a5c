"""The operator install: the wheel `make dist` builds carries everything `autotune` reads."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_the_wheel_runs_init_and_validate_without_the_checkout(tmp_path: Path) -> None:
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    wheel = next(tmp_path.glob("autotune-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for needed in (
        "autotune/_data/search_spaces/sglang-eagle.yaml",
        "autotune/_data/search_spaces/llamacpp-spec.yaml",
        "autotune/_data/examples/demo.yaml",
        "autotune/_data/examples/sglang-sim.service",
        "autotune/bench/prompts/copy.jsonl",
    ):
        assert needed in names, needed
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]

    # Installed apart from the checkout (its dependencies are this interpreter's own).
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    work = tmp_path / "operator"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target), "AUTOTUNE_LOG_FORMAT": "console"}

    def autotune(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "autotune", *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    where = subprocess.run(
        [sys.executable, "-c", "import autotune; print(autotune.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(target)), where.stdout
    unit = target / "autotune" / "_data" / "examples" / "sglang-sim.service"
    init = autotune("init", "--unit-file", str(unit), "--out", str(work))
    assert init.returncode == 0, init.stderr
    assert "search_space: sglang-eagle.yaml" in (work / "autotune.yaml").read_text()
    assert "configs; unit sglang-sim.service" in init.stdout  # the built-in space was found
    assert not (work / "autotune.db").exists()  # validate creates nothing
