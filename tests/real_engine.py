"""One real engine at a time: the llama.cpp and vLLM tests measure real servers on two cores.

pytest-xdist runs files on two workers; a test of tests/llamacpp/ beside one of tests/vllm/
would slow both past their timeouts and make their figures meaningless. Each such test
holds this machine-wide lock while it runs (the other worker's test waits for it).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

LOCK = Path(tempfile.gettempdir()) / f"autotune-tests-real-engine-{os.getuid()}.lock"
#: Longest a real-engine test may take, its wait for the other worker's test included.
TIMEOUT = 1200


@pytest.fixture(autouse=True)
def one_real_engine() -> Iterator[None]:
    with LOCK.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
