"""The client against autotune's simulated SGLang: its tok/s must match the server's own count."""

from __future__ import annotations

import asyncio
import bisect
import importlib.util
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from autotune.bench import LevelSettings, load_workload, run_level
from autotune.testservers.ports import free_port as _free_port

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("autotune.sim.__main__") is None, reason="autotune.sim not built yet"
)

SIM_FLAGS = [
    "--speculative-algorithm", "EAGLE",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
    "--max-running-requests", "64",
    "--sim-load-time", "0",
    "--sim-seed", "7",
]  # fmt: skip


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    yield from _start_sim(SIM_FLAGS)


@pytest.fixture(scope="module")
def small_sim() -> Iterator[str]:
    """A server that runs only 8 requests at once: more clients queue."""
    flags = [f if f != "64" else "8" for f in SIM_FLAGS]
    yield from _start_sim(flags)


def _start_sim(flags: list[str]) -> Iterator[str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "autotune.sim", "--port", str(port), *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"simulator did not become ready (exit code {proc.poll()})")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def sim_tokens(stats: dict[str, Any], start: float, end: float) -> float:
    """Output tokens the simulator counted between two monotonic times.

    Its ring holds (monotonic time, cumulative output tokens) at every step, so the count
    at a time is the last step's at or before it: exact, with no interpolation.
    """
    ring = stats["ring"]
    times = [t for t, _ in ring]

    def cumulative(t: float) -> float:
        i = bisect.bisect_right(times, t)
        assert i > 0, "window starts before the simulator's ring"
        return float(ring[i - 1][1])

    return cumulative(end) - cumulative(start)


#: The client's window figure against the simulator's own count over the same window.
#: Before window edges moved to the end of their delivery burst, it read 0.6-1.8 % low at
#: 64 streams on 3-s windows; after, within 0.05 % typically and 0.27 % at worst (docs/
#: benchmark.md). The margin is for a loaded CI machine; the old edges fail 3 of these 7.
#: Since the simulator's own acceptance law (8c009fe), the saturated case (64 clients, 8
#: slots) read 0.83-0.84 % low in about half its suite runs: one step of 8 streams on the other
#: side of an edge. The simulator stamps a step when it emits it, the client reads it up to
#: 19 ms later on a loaded machine (docs/benchmark.md): a read delay longer than the gap to the
#: next step moves that step across the edge, either way. 1 % holds it.
AGREEMENT = 0.01


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["natural", "greedy"])
@pytest.mark.parametrize("concurrency", [1, 16, 64])
def test_throughput_matches_the_simulators_own_counters(
    sim: str, workload: str, concurrency: int
) -> None:
    wl = load_workload(workload, max_tokens=96)
    settings = LevelSettings(concurrency, min_duration_s=2.5, max_duration_s=4.0, ci_width=0.02)
    res = asyncio.run(run_level(sim, None, wl, settings))
    stats = httpx.get(sim + "/sim/stats", timeout=10, trust_env=False).json()
    truth = sim_tokens(stats, res.window_start_monotonic, res.window_end_monotonic)
    assert res.errors == 0 and res.usage_source == "usage"
    assert res.output_throughput == pytest.approx(truth / res.window_s, rel=AGREEMENT)
    assert res.tokens_per_chunk > 1.5, "speculation sends several tokens per chunk"


@pytest.mark.slow
def test_native_generate_reports_per_request_acceptance(sim: str) -> None:
    wl = load_workload("greedy", max_tokens=96)
    settings = LevelSettings(8, min_duration_s=2.0, max_duration_s=3.0, ci_width=None)
    before = httpx.get(sim + "/sim/stats", timeout=10, trust_env=False).json()
    res = asyncio.run(run_level(sim, None, wl, settings, endpoint="generate"))
    after = httpx.get(sim + "/sim/stats", timeout=10, trust_env=False).json()
    assert res.usage_source == "meta_info" and res.accept_length is not None
    # The simulator's own acceptance over the same requests (warmup included, so loose).
    steps = after["verify_steps"] - before["verify_steps"]
    tokens = after["decode_tokens"] - before["decode_tokens"]
    assert res.accept_length == pytest.approx(tokens / steps, rel=0.1)


@pytest.mark.slow
def test_more_clients_than_server_slots_measures_the_saturated_server(small_sim: str) -> None:
    """C above max_running_requests: the window opens when the server's slots stream,
    and requests still queued at the stop are cancelled rather than drained."""
    wl = load_workload("natural", max_tokens=96)
    settings = LevelSettings(
        64, min_duration_s=2.5, max_duration_s=4.0, ci_width=0.02, server_slots=8
    )
    before = httpx.get(small_sim + "/sim/stats", timeout=10, trust_env=False).json()
    res = asyncio.run(run_level(small_sim, None, wl, settings))
    stats = httpx.get(small_sim + "/sim/stats", timeout=10, trust_env=False).json()
    truth = sim_tokens(stats, res.window_start_monotonic, res.window_end_monotonic)
    assert res.errors == 0
    assert res.output_throughput == pytest.approx(truth / res.window_s, rel=AGREEMENT)
    assert "8 slots" in res.window
    aborted = stats["requests"]["aborted"] - before["requests"]["aborted"]
    assert aborted > 0, "queued requests should have been cancelled at the stop"
