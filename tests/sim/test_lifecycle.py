"""Startup refusals, simulated faults and stopping: real processes, exit codes, log lines."""

from __future__ import annotations

import signal
import time

import httpx
import pytest

from tests.sim.conftest import StartSim


def spec(steps: int, topk: int | None = None, draft: int | None = None) -> list[str]:
    flags = ["--speculative-algorithm", "EAGLE"]
    if steps:
        flags += ["--speculative-num-steps", str(steps)]
    if topk is not None:
        flags += ["--speculative-eagle-topk", str(topk)]
    if draft is not None:
        flags += ["--speculative-num-draft-tokens", str(draft)]
    return flags


@pytest.mark.parametrize(
    "flags, exception, text",
    [
        pytest.param(spec(0, topk=2), "AssertionError", "", id="topk-without-steps"),
        pytest.param(spec(0, draft=4), "AssertionError", "", id="draft-without-steps"),
        pytest.param(
            spec(2, 2, 8), "RuntimeError", "Capture cuda graph failed", id="draft-over-tree"
        ),
        pytest.param(
            spec(8, 8, 64), "RuntimeError", "Not enough memory", id="oom-huge-tree"
        ),
        pytest.param(
            [*spec(3, 1, 4), "--mem-fraction-static", "0.7"], "RuntimeError",
            "Please try to increase --mem-fraction-static", id="oom-low-mem-fraction",
        ),
    ],
)  # fmt: skip
def test_refusals_exit_nonzero_with_sglang_log(
    start_sim: StartSim, flags: list[str], exception: str, text: str
) -> None:
    sim = start_sim(*flags, ready=False)
    assert sim.wait_exit() != 0
    log = sim.log
    assert "Traceback (most recent call last):" in log
    last = [line for line in log.splitlines() if line.startswith(exception)]
    assert last and text in last[-1], log[-1500:]
    assert "Uvicorn running" not in log and "fired up" not in log


def test_args_refusal_is_instant(start_sim: StartSim) -> None:
    sim = start_sim(*spec(0, topk=4), "--sim-load-time", "30", ready=False)
    assert sim.wait_exit(timeout=10) == 1
    assert "Load weight begin" not in sim.log


def test_crash_on_start(start_sim: StartSim) -> None:
    sim = start_sim(*spec(3, 1, 4), "--sim-fault", "crash-on-start", "--sim-load-time", "1",
                    ready=False)  # fmt: skip
    seen = set()
    while sim.proc.poll() is None:
        seen.add(sim.health())
        time.sleep(0.05)
    assert sim.proc.returncode != 0
    assert seen <= {None}, "nothing listens while loading"
    assert "Load weight begin" in sim.log and "Load weight end" not in sim.log
    assert "NCCL error" in sim.log and "Received sigquit from a child process" in sim.log


def test_hang_on_start_never_ready(start_sim: StartSim) -> None:
    sim = start_sim(*spec(3, 1, 4), "--sim-fault", "hang-on-start", ready=False)
    deadline = time.monotonic() + 3
    codes = set()
    while time.monotonic() < deadline:
        codes.add(sim.health())
        time.sleep(0.05)
    assert 503 in codes and 200 not in codes
    assert httpx.get(sim.url + "/v1/models").status_code == 200  # answers, but not ready
    assert "Uvicorn running" in sim.log and "fired up" not in sim.log
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.wait_exit(5) == 0


def test_slow_start_is_ready_later(start_sim: StartSim) -> None:
    t0 = time.monotonic()
    sim = start_sim(*spec(3, 1, 4), "--sim-fault", "slow-start:2.5", ready=False)
    time.sleep(1.5)
    assert sim.health() is None, "still loading: nothing listens"
    sim.wait_ready()
    assert time.monotonic() - t0 >= 2.5


def test_crash_after_n_requests(start_sim: StartSim) -> None:
    sim = start_sim(*spec(3, 1, 4), "--sim-fault", "crash-after:3")
    body = {"text": "x", "sampling_params": {"max_new_tokens": 5, "temperature": 0,
                                             "ignore_eos": True}}  # fmt: skip
    for _ in range(3):
        r = httpx.post(sim.url + "/generate", json=body, timeout=30)
        assert r.json()["meta_info"]["completion_tokens"] == 5
    assert sim.wait_exit(10) != 0
    assert "RuntimeError: CUDA error" in sim.log
    assert "Received sigquit from a child process" in sim.log
    assert sim.health() is None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_promptly_with_exit_0(start_sim: StartSim, sig: signal.Signals) -> None:
    sim = start_sim(*spec(3, 1, 4))
    # A request in flight must not hold the stop up.
    body = {"text": "x", "stream": True,
            "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True}}  # fmt: skip
    with httpx.stream("POST", sim.url + "/generate", json=body, timeout=30) as r:
        next(r.iter_bytes())
        t0 = time.monotonic()
        sim.proc.send_signal(sig)
        assert sim.wait_exit(5) == 0
    assert time.monotonic() - t0 < 2


def test_signal_during_load_exits_0(start_sim: StartSim) -> None:
    sim = start_sim(*spec(3, 1, 4), "--sim-load-time", "30", ready=False)
    time.sleep(0.8)
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.wait_exit(5) == 0


def test_port_in_use(start_sim: StartSim) -> None:
    first = start_sim()
    second = start_sim("--port", str(first.port), ready=False)
    assert second.wait_exit(15) != 0
    assert "address already in use" in second.log


def test_crash_after_0_dies_once_ready(start_sim: StartSim) -> None:
    sim = start_sim(*spec(3, 1, 4), "--sim-fault", "crash-after:0", ready=False)
    assert sim.wait_exit(15) == 1
    log = sim.log
    assert log.index("fired up and ready") < log.index("RuntimeError: CUDA error")
