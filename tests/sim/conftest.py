"""Start real simulator processes on free loopback ports; always stop them afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from autotune.testservers.ports import free_port

DEFAULT_FLAGS = ("--sim-load-time", "0.2")


class SimProc:
    def __init__(self, flags: list[str], log_path: Path) -> None:
        self.port = free_port()
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autotune.sim", "--port", str(self.port), *flags],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def health(self) -> int | None:
        """/health status, or None while nothing listens."""
        try:
            return httpx.get(self.url + "/health", timeout=2).status_code
        except httpx.TransportError:
            return None

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"simulator exited with {self.proc.returncode}:\n{self.log[-3000:]}")
            if self.health() == 200:
                return
            time.sleep(0.05)
        pytest.fail(f"simulator not ready after {timeout} s:\n{self.log[-3000:]}")

    def wait_exit(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"simulator still running after {timeout} s:\n{self.log[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()


StartSim = Callable[..., SimProc]


def _starter(tmp: Path, started: list[SimProc]) -> StartSim:
    def start(*flags: str, ready: bool = True, defaults: bool = True) -> SimProc:
        args = [*DEFAULT_FLAGS, *flags] if defaults else list(flags)
        sim = SimProc(args, tmp / f"sim-{len(started)}.log")
        started.append(sim)
        if ready:
            sim.wait_ready()
        return sim

    return start


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[StartSim]:
    """Factory: start_sim(*flags, ready=True) -> SimProc, stopped at teardown even on failure."""
    started: list[SimProc] = []
    try:
        yield _starter(tmp_path, started)
    finally:
        for sim in started:
            sim.stop()


@pytest.fixture(scope="module")
def start_module_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StartSim]:
    """Like start_sim, for servers shared by a module's tests."""
    started: list[SimProc] = []
    try:
        yield _starter(tmp_path_factory.mktemp("sim"), started)
    finally:
        for sim in started:
            sim.stop()
