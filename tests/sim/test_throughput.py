"""Throughput measured over HTTP agrees with --predict (the model both of them use).

Streams through /v1/chat/completions with include_usage, counts tokens from
`usage` only, and measures over a steady window: each request's tokens count
in proportion to its overlap with the window, so partial requests at the edges
do not bias a short window.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import httpx
import pytest

from tests.sim.conftest import SimProc, StartSim

FLAGS = ("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")  # fmt: skip
SEED = "7"  # noise stays on (default 2 %); a fixed seed makes this start's speed factor known
PROMPT = "Explain how speculative decoding trades memory for speed. " * 13
MAX_TOKENS = 256


@pytest.fixture(scope="module")
def sim(start_module_sim: StartSim) -> SimProc:
    return start_module_sim(*FLAGS, "--sim-seed", SEED)


def predicted(concurrency: int, input_len: int) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "autotune.sim", "--predict", *FLAGS,
         "--concurrency", str(concurrency), "--max-tokens", str(MAX_TOKENS),
         "--input-len", str(input_len), "--workload", "greedy"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return float(json.loads(out)["output_throughput"])


async def drive(url: str, concurrency: int, seconds: float) -> tuple[float, float, float, int]:
    """(tokens/s over the window, window start, window end, prompt tokens)."""
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS,
            "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    recs: list[tuple[float, float, int]] = []
    prompt = [0]
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def worker(stop_at: float) -> None:
            while time.monotonic() < stop_at:
                t0, usage = time.monotonic(), None
                async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
                    async for line in r.aiter_lines():
                        if line.startswith("data: {") and '"usage":{' in line:
                            usage = json.loads(line[6:])["usage"]
                assert usage is not None, "no usage chunk"
                prompt[0] = usage["prompt_tokens"]
                recs.append((t0, time.monotonic(), usage["completion_tokens"]))

        start = time.monotonic()
        # Warm-up: every stream has finished one request before the window opens.
        warm = max(1.2, 3.2 * concurrency / 16)
        stop_at = start + warm + seconds
        await asyncio.gather(*(worker(stop_at) for _ in range(concurrency)))
    w0, w1 = start + warm, stop_at
    tokens = sum(n * max(0.0, min(e, w1) - max(s, w0)) / (e - s) for s, e, n in recs)
    return tokens / (w1 - w0), w0, w1, prompt[0]


@pytest.mark.slow
@pytest.mark.parametrize("concurrency, seconds", [(1, 7.0), (16, 8.0)])
def test_measured_throughput_within_5pct_of_prediction(
    sim: SimProc, concurrency: int, seconds: float
) -> None:
    measured, w0, w1, prompt_tokens = asyncio.run(drive(sim.url, concurrency, seconds))
    stats = httpx.get(sim.url + "/sim/stats").json()
    expected = predicted(concurrency, prompt_tokens)
    ratio = measured / expected
    assert abs(ratio - 1) <= 0.05, (
        f"{concurrency} streams: measured {measured:.1f} tok/s, predicted {expected:.1f} "
        f"(x{ratio:.3f}; speed factor of this start {stats['speed_factor']})"
    )
    # The simulator's own counters over the same window tell the same story.
    ring = [(t, n) for t, n in stats["ring"] if w0 <= t <= w1]
    server = (ring[-1][1] - ring[0][1]) / (ring[-1][0] - ring[0][0])
    assert abs(server / measured - 1) <= 0.05, (server, measured)
    assert stats["scheduler"]["resyncs"] == 0
