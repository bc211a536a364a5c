"""SGLang adapter: parsers and failure kinds on recorded logs; server_info over loopback HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from autotune.engines import Engine, Failure, ServerInfo, get_engine
from autotune.engines.sglang import SGLangEngine, parse_capacity
from autotune.errors import ConfigError, ServerFailed
from autotune.testservers.ports import free_port

LOGS = Path(__file__).parents[1] / "data" / "sglang"
engine = SGLangEngine()


def log(name: str) -> str:
    return (LOGS / name).read_text()


# --------------------------------------------------------------------------- registry


def test_get_engine() -> None:
    e: Engine = get_engine("SGLang")
    assert isinstance(e, SGLangEngine) and e.name == "sglang"
    assert e.ready_paths() == ("/ready", "/health")
    with pytest.raises(ConfigError, match=r"unknown engine 'tgi' \(known: sglang, llama.cpp, vllm"):
        get_engine("tgi")


# --------------------------------------------------------------------------- log parsers


def test_ready_line() -> None:
    assert engine.ready_in_log(log("ready-mtp.log"))
    assert not engine.ready_in_log(log("hang.log"))


def test_capacity_line_current_format() -> None:
    assert engine.capacity_from_log(log("ready-mtp.log")) == (455357, 26)
    cap = parse_capacity(log("ready-mtp.log"))
    assert cap is not None
    assert cap.chunked_prefill_size == 8192 and cap.max_prefill_tokens == 16384
    assert cap.context_len == 262144 and cap.available_mem_gb == 7.41


def test_capacity_line_old_format_and_variants() -> None:
    assert engine.capacity_from_log(log("ready-old.log")) == (310129, 2049)
    cap = parse_capacity(log("ready-old.log"))
    assert cap is not None and cap.available_mem_gb is None and cap.chunked_prefill_size is None
    cpu = (
        "[2025-10-02 09:15:45 TP0] max_total_num_tokens=8000, chunked_prefill_size=4096, "
        "max_prefill_tokens=16384, max_running_requests=8, context_len=4096, "
        "available_cpu_mem=120.50 GB\n"
    )
    cap = parse_capacity(cpu)
    assert cap is not None and cap.available_mem_gb == 120.5
    oldest = "[gpu_id=0] max_total_num_tokens=5000, max_prefill_tokens=4096, context_len=4096\n"
    assert engine.capacity_from_log(oldest) == (5000, None)


def test_capacity_last_occurrence_wins_and_absent_is_none() -> None:
    two = log("ready-old.log") + log("ready-mtp.log")
    assert engine.capacity_from_log(two) == (455357, 26)
    assert engine.capacity_from_log(log("hang.log")) == (None, None)
    # The elastic-memory line is not the scheduler's capacity line.
    elastic = "New memory pool size: 20.00 GB, max_total_num_tokens=1000, max_num_reqs=10\n"
    assert engine.capacity_from_log(elastic) == (None, None)


def test_accept_length_averages_decode_lines() -> None:
    assert engine.accept_length_from_log(log("ready-mtp.log")) == pytest.approx(1.80)
    assert engine.accept_length_from_log(log("ready-old.log")) == pytest.approx(3.20)
    assert engine.accept_length_from_log(log("hang.log")) is None
    # Only the given slice counts: a caller passes the log of one benchmark level.
    text = log("ready-mtp.log")
    last = text[text.rindex("Decode batch") - 30 :]
    assert engine.accept_length_from_log(last) == pytest.approx(1.80)
    no_spec = "Decode batch, #running-req: 1, #token: 9, token usage: 0.00, accept len: 0.00, \n"
    assert engine.accept_length_from_log(no_spec) is None


# --------------------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("name", "exit_code", "kind", "reason"),
    [
        (
            "refused-argparse.log",
            2,
            # A flag the build does not have stops the study (as for llama.cpp).
            "unsupported_flag",
            "this SGLang does not accept --speculative-num-step",
        ),
        (
            "refused-invalid-choice.log",
            2,
            "refused",
            "argument --speculative-algorithm: invalid choice: 'MEDUSA'",
        ),
        (
            "refused-valueerror.log",
            1,
            "refused",
            "ValueError: speculative_eagle_topk > 1 with page_size > 1 is unstable",
        ),
        (
            "refused-assert.log",
            1,
            "refused",
            "AssertionError: assert (self.speculative_eagle_topk is None and "
            "self.speculative_num_draft_tokens is None) "
            "(server_args.py, in _handle_speculative_decoding)",
        ),
        (
            "oom-kv.log",
            137,
            "out_of_memory",
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        ),
        (
            "oom-cuda-graph.log",
            137,
            "out_of_memory",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        ),
        ("crash-capture.log", 1, "crash_on_start", "RuntimeError: selected index k out of range"),
        (
            "hang.log",
            None,
            "not_ready",
            "alive but never ready; last log line: Loading safetensors checkpoint shards:  41%",
        ),
        (
            "hang.log",
            137,
            "crash_on_start",
            "killed by SIGKILL (exit code 137) before it was ready; last log line: Loading",
        ),
        (
            "crash-after-ready.log",
            137,
            "crash_during_benchmark",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ),
        (
            "oom-after-ready.log",
            None,
            "out_of_memory",
            "RuntimeError: alloc_req_slots runs out of memory.",
        ),
    ],
)
def test_failure_kinds(name: str, exit_code: int | None, kind: str, reason: str) -> None:
    failure = engine.classify_failure(log(name), exit_code)
    assert isinstance(failure, Failure)
    assert failure.kind == kind
    assert failure.reason.startswith(reason), failure.reason
    assert "\n" not in failure.reason and len(failure.reason) <= 300


def test_a_dead_scheduler_beats_a_live_http_process() -> None:
    # SGLang's HTTP process can outlive its scheduler: the log decides.
    failure = engine.classify_failure(log("crash-capture.log"), None)
    assert failure.kind == "crash_on_start"


def test_refused_without_a_traceback_before_loading() -> None:
    text = "ValueError: speculative_num_steps must be positive, got 0\n"
    assert engine.classify_failure(text, 1) == Failure(
        "refused", "ValueError: speculative_num_steps must be positive, got 0"
    )
    # The same error after loading began is not a flag refusal.
    later = "[2025-10-02 13:00:11 TP0] Load weight begin. avail mem=93.68 GB\n" + text
    assert engine.classify_failure(later, 1).kind == "crash_on_start"


def test_a_model_error_with_a_traceback_is_a_crash_not_a_refusal() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/srv/sglang/python/sglang/srt/configs/model_config.py", line 80, in __init__\n'
        "    raise ValueError(f'Unsupported architecture {arch}')\n"
        "ValueError: Unsupported architecture FooForCausalLM\n"
    )
    assert engine.classify_failure(text, 1) == Failure(
        "crash_on_start", "ValueError: Unsupported architecture FooForCausalLM"
    )


def test_an_error_raised_below_the_argument_checks_is_no_refusal() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/srv/sglang/python/sglang/srt/server_args.py", line 612, in __post_init__\n'
        "    self.model_config = get_config(self.model_path)\n"
        '  File "/venv/site-packages/transformers/configuration_utils.py", line 9, in x\n'
        "    raise ValueError(msg)\n"
        "ValueError: Unrecognized model in /srv/models/missing\n"
    )
    assert engine.classify_failure(text, 1).kind == "crash_on_start"


def test_exit_without_any_log() -> None:
    assert engine.classify_failure("", 0) == Failure(
        "crash_on_start", "exited with code 0 before it was ready"
    )
    assert engine.classify_failure("", None) == Failure("not_ready", "alive but never ready")


def test_long_reasons_are_clipped() -> None:
    text = "ValueError: " + "x" * 1000 + "\n"
    reason = engine.classify_failure(text, 1).reason
    assert len(reason) == 300 and reason.endswith("…")


# --------------------------------------------------------------------------- server_info


class _Routes:
    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, Any]] = {}
        self.auth: list[str | None] = []


@pytest.fixture
def fake_sglang() -> Iterator[tuple[str, _Routes]]:
    """A real HTTP server on 127.0.0.1 answering canned JSON per path (like SGLang's API)."""
    state = _Routes()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.auth.append(self.headers.get("Authorization"))
            status, body = state.routes.get(self.path, (404, {"detail": "Not Found"}))
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # A short poll interval keeps shutdown() quick.
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


PARAMS = ["speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens"]


def info(base_url: str, api_key: str | None = None, params: list[str] = PARAMS) -> ServerInfo:
    return asyncio.run(engine.server_info(base_url, params, api_key))


def test_server_info_of_a_current_build(fake_sglang: tuple[str, _Routes]) -> None:
    url, state = fake_sglang
    state.routes["/get_server_info"] = (
        200,
        {
            "model_path": "/srv/models/Qwen3.5-122B-A10B",
            "speculative_algorithm": "EAGLE",
            "speculative_num_steps": 2,
            "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": 3,  # resolved: the server adjusted 8 to steps + 1
            "max_running_requests": 48,
            "context_length": None,
            "max_total_num_tokens": 377207,
            "max_req_input_len": 262139,
            "internal_states": [
                {
                    "last_gen_throughput": 129.3,
                    "memory_usage": {"weight": 60.66, "kvcache": 20.84, "token_capacity": 377207},
                    "effective_max_running_requests_per_dp": 21,
                    "avg_spec_accept_length": 2.41,
                }
            ],
            "version": "0.5.4",
        },
    )
    state.routes["/v1/models"] = (200, {"data": [{"id": "qwen", "max_model_len": 262144}]})
    got = info(url, api_key="secret")
    assert got.resolved == {
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 3,
    }
    assert got.max_running_requests == 21  # the scheduler's cap, not the configured 48
    assert got.max_total_num_tokens == 377207
    assert got.context_len == 262144
    assert got.version == "0.5.4"
    assert got.raw["model_path"] == "/srv/models/Qwen3.5-122B-A10B"
    assert state.auth[0] == "Bearer secret"


def test_server_info_of_an_older_build(fake_sglang: tuple[str, _Routes]) -> None:
    url, state = fake_sglang
    state.routes["/server_info"] = (
        200,
        {
            "speculative_num_steps": None,
            "max_running_requests": 26,
            "max_total_num_tokens": 455357,
            "context_len": 131072,
            "internal_states": [{"memory_usage": {"token_capacity": 1}}],
        },
    )
    got = info(url, params=[*PARAMS, "unknown_knob"])
    # /get_server_info answered 404: the newer name was used; missing names are left out.
    assert got.resolved == {"speculative_num_steps": None}
    assert got.max_running_requests == 26 and got.max_total_num_tokens == 455357
    assert got.context_len == 131072 and got.version is None
    assert state.auth[0] is None


def test_server_info_reads_capacity_from_internal_states_with_dp(
    fake_sglang: tuple[str, _Routes],
) -> None:
    url, state = fake_sglang
    per_dp = {"effective_max_running_requests_per_dp": 16, "memory_usage": {"token_capacity": 9}}
    state.routes["/get_server_info"] = (200, {"internal_states": [per_dp, per_dp]})
    got = info(url)
    assert got.max_running_requests == 32 and got.max_total_num_tokens == 9
    assert got.context_len is None


@pytest.mark.parametrize(
    ("status", "body", "error", "text"),
    [
        (401, {"error": "unauthorized"}, ConfigError, "asks for an API key .HTTP 401"),
        (500, {"error": "boom"}, ServerFailed, "answered HTTP 500"),
        (200, b"<html>not json</html>", ServerFailed, "did not answer JSON"),
        (200, [1, 2], ServerFailed, "did not answer a JSON object"),
    ],
)
def test_server_info_errors(
    fake_sglang: tuple[str, _Routes],
    status: int,
    body: Any,
    error: type[Exception],
    text: str,
) -> None:
    url, state = fake_sglang
    state.routes["/get_server_info"] = (status, body)
    with pytest.raises(error, match=text):
        info(url)


def test_server_info_when_nothing_listens() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerFailed) as failed:
        info(f"http://127.0.0.1:{port}")
    assert failed.value.kind == "not_ready" and "ConnectError" in failed.value.reason


# --------------------------------------------------------------------------- the simulated server

HAVE_SIM = importlib.util.find_spec("autotune.sim.__main__") is not None
needs_sim = pytest.mark.skipif(not HAVE_SIM, reason="the simulated server is not written yet")
SIM_MODEL = ["--model-path", "Qwen/Qwen3.5-122B-A10B", "--sim-load-time", "0.2"]
EAGLE = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2"]


class Sim:
    """`python -m autotune.sim` on a free loopback port, its output in a file."""

    def __init__(self, log_path: Path, flags: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        argv = [sys.executable, "-m", "autotune.sim", "--host", "127.0.0.1"]
        argv += ["--port", str(self.port), *SIM_MODEL, *flags]
        with log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_healthy(self, timeout: float = 30.0) -> bool:
        """True once /health answers 200; False if the process exits first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return True
            time.sleep(0.05)
        raise AssertionError(f"the simulator was neither healthy nor dead after {timeout} s")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def start_sim(tmp_path: Path) -> Iterator[Callable[[list[str]], Sim]]:
    started: list[Sim] = []

    def start(flags: list[str]) -> Sim:
        sim = Sim(tmp_path / f"sim-{len(started)}.log", flags)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


@needs_sim
def test_sim_server_info_matches_its_log(start_sim: Callable[[list[str]], Sim]) -> None:
    flags = [*EAGLE, "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "8"]
    sim = start_sim(flags)
    assert sim.wait_healthy()
    log_text = sim.log()
    assert engine.ready_in_log(log_text)

    got = info(sim.url)
    # topk 1: the server rewrote 8 draft tokens to steps + 1, and says so.
    assert got.resolved == {
        "speculative_num_steps": 2,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 3,
    }
    tokens, running = engine.capacity_from_log(log_text)
    assert tokens is not None and running is not None
    assert (got.max_total_num_tokens, got.max_running_requests) == (tokens, running)
    assert got.context_len == 262144
    assert got.version

    # Decode lines appear once requests run; their acceptance lies in [1, steps + 1].
    async def generate() -> None:
        async with httpx.AsyncClient(base_url=sim.url, timeout=30) as client:
            body = {"text": "Tell me a story.", "sampling_params": {"max_new_tokens": 200}}
            replies = await asyncio.gather(*(client.post("/generate", json=body) for _ in range(4)))
            assert all(r.status_code == 200 for r in replies)

    before = len(sim.log())
    asyncio.run(generate())
    accept = engine.accept_length_from_log(sim.log()[before:])
    assert accept is not None and 1.0 <= accept <= 3.0


@needs_sim
@pytest.mark.parametrize(
    ("flags", "kind", "reason"),
    [
        (
            ["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "2"],
            "refused",
            "AssertionError",
        ),
        ([*EAGLE, "--speculative-num-draft-tokens", "0"], "refused", "ValueError"),
        (
            ["--speculative-algorithm", "MEDUSA"],
            "refused",
            "ValueError: Unknown speculative algorithm name: MEDUSA",
        ),
        (["--mem-fraction-static", "0.5"], "out_of_memory", "RuntimeError: Not enough memory"),
        (
            [*EAGLE, "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "16"],
            "crash_on_start",
            "RuntimeError: Capture cuda graph failed",
        ),
        (["--sim-fault", "crash-on-start"], "crash_on_start", "torch.distributed.DistBackendError"),
    ],
)
def test_sim_failures_are_classified(
    start_sim: Callable[[list[str]], Sim], flags: list[str], kind: str, reason: str
) -> None:
    sim = start_sim(flags)
    assert not sim.wait_healthy()
    failure = engine.classify_failure(sim.log(), sim.proc.returncode)
    assert (failure.kind, failure.reason[: len(reason)]) == (kind, reason)


@needs_sim
def test_sim_that_never_gets_ready(start_sim: Callable[[list[str]], Sim]) -> None:
    sim = start_sim(["--sim-fault", "hang-on-start"])
    deadline = time.monotonic() + 30
    while "Uvicorn running" not in sim.log():
        assert time.monotonic() < deadline and sim.proc.poll() is None
        time.sleep(0.05)
    assert httpx.get(sim.url + "/health", timeout=5).status_code == 503
    failure = engine.classify_failure(sim.log(), None)
    assert failure.kind == "not_ready"
    assert failure.reason.startswith("alive but never ready; last log line: INFO:")
