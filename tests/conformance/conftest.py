"""The real SGLang wheels the conformance suite reads (`make sglang-wheels` downloads them).

Without them these tests skip with one line; under CI (CI=true) a missing wheel is a
failure, never a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autotune.engines import sglang_facts
from tests.conformance.wheel import Wheel

WHEEL_DIR = Path(
    os.environ.get("AUTOTUNE_SGLANG_WHEELS", Path.home() / ".cache/autotune/sglang-wheels")
)
_open: dict[str, Wheel] = {}


def _wheel(version: str) -> Wheel:
    if version not in _open:
        found = sorted(WHEEL_DIR.glob(f"sglang-{version}-*.whl"))
        if not found:
            problem = f"no sglang-{version} wheel in {WHEEL_DIR}; run make sglang-wheels"
            if os.environ.get("CI"):
                pytest.fail(f"CI must read the real SGLang wheels: {problem}")
            pytest.skip(problem)
        _open[version] = Wheel(found[0])
    return _open[version]


@pytest.fixture(params=sglang_facts.CHECKED)
def wheel(request: pytest.FixtureRequest) -> Wheel:
    """Each checked SGLang release in turn."""
    return _wheel(request.param)


@pytest.fixture
def newest() -> Wheel:
    """The release the simulator speaks."""
    return _wheel(sglang_facts.SIMULATED)
