"""The one harness for real engines in tests: llama-server (tests/llamacpp/) and vLLM
(tests/vllm/).

    paths = require(find, NotInstalled, "make vllm-install")  # a skip here, a failure in CI
    with serve(argv, log_path) as url: ...  # ready on /health, stopped by PID

Real-engine tests measure real servers on two cores, so they never run beside each other:
tests/helpers/scheduling.py gives every file of both folders to one pytest-xdist worker, back
to back, and each test also holds a machine-wide lock (`one_real_engine`) for a run that schedules
them some other way. A server only read by its tests is a session fixture of its folder,
started once on that one worker.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

import pytest

from tests.helpers.e2e import wait_http

LOCK = Path(tempfile.gettempdir()) / f"autotune-tests-real-engine-{os.getuid()}.lock"
#: Longest a real-engine test may take, its wait for another worker's test included.
TIMEOUT = 1200
#: The folders whose tests start real engines (tests/helpers/scheduling.py schedules them together).
FOLDERS = ("tests/llamacpp/", "tests/vllm/")

T = TypeVar("T")


@contextlib.contextmanager
def machine_lock() -> Iterator[None]:
    with LOCK.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def one_real_engine() -> Iterator[None]:
    with machine_lock():
        yield


def require(paths: Callable[[], T], missing: type[Exception], install: str) -> T:
    """What `paths()` finds installed; `missing` is a skip here, a failure under CI (CI=true)."""
    try:
        return paths()
    except missing as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real-engine tests: {exc}")
        pytest.skip(f"not installed here ({exc}); {install}")


@contextlib.contextmanager
def serve(
    argv: list[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 300,
    stop_timeout: float = 30,
) -> Iterator[str]:
    """The server `argv` starts, once its /health answers 200; its base URL.

    `argv` must hold `--port N`. The server is stopped by its PID on exit, also when the test
    fails; its output goes to `log_path`, whose tail a failed start shows.
    """
    port = argv[argv.index("--port") + 1]
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        try:
            wait_http(url + "/health", proc, ready_timeout, log_path)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(stop_timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
