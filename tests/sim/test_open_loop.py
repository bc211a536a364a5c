"""Open-loop levels against the real simulator process: arrivals at a rate, goodput, queueing.

The simulator runs 4 requests at once here (`--max-running-requests 4`), so a rate it
serves comfortably and one it cannot keep up with are both cheap to reach.
"""

from __future__ import annotations

import asyncio

import httpx

from autotune.bench import load_workload
from autotune.bench.arrivals import arrival_times
from autotune.bench.open_loop import RateResult, RateSettings, Slo, run_rate
from tests.sim.conftest import SimProc, StartSim

SLO = Slo(ttft_ms=1000, tpot_ms=80, attainment=0.9)
FLAGS = ("--max-running-requests", "4", "--sim-seed", "5", "--sim-speedup", "4")


def _rate(sim: SimProc, rate: float, seconds: float = 8.0) -> RateResult:
    workload = load_workload("natural", max_tokens=96, seed=2)
    settings = RateSettings(
        rate=rate, duration_s=seconds, seed=1, slo=SLO, server_slots=4, time_scale=4.0
    )
    return asyncio.run(run_rate(sim.url, None, workload, settings, endpoint="generate"))


def _received(sim: SimProc) -> int:
    return int(httpx.get(sim.url + "/sim/stats", timeout=5).json()["requests"]["received"])


def test_a_rate_the_server_keeps_up_with_is_all_goodput_and_one_it_cannot_queues(
    start_sim: StartSim,
) -> None:
    sim = start_sim(*FLAGS)
    light = _rate(sim, 0.5)
    # Every arrival time of the seeded schedule was sent, and the server received each.
    assert light.sent == len(arrival_times(0.5, 8.0, seed=1)) == _received(sim)
    assert light.completed == light.sent and light.unfinished == 0 and light.errors == 0
    assert light.good == light.sent and light.meets_slo
    assert light.queued_max == 0  # never more in flight than the 4 slots
    assert light.goodput == light.request_throughput

    before = _received(sim)
    heavy = _rate(sim, 12.0)
    assert heavy.sent == len(arrival_times(12.0, 8.0, seed=1))
    assert _received(sim) - before == heavy.sent
    # Four slots cannot serve twelve arrivals a second: requests wait for a slot, their
    # first token comes late, and the rate misses its SLO.
    assert heavy.queued_max is not None and heavy.queued_max > 4
    assert heavy.ttft_ms_p99 is not None and light.ttft_ms_p99 is not None
    assert heavy.ttft_ms_p99 > 5 * light.ttft_ms_p99
    assert not heavy.meets_slo and heavy.good_share < SLO.attainment
    assert heavy.good <= heavy.completed <= heavy.sent
    assert heavy.goodput < heavy.request_throughput
    # The server was busy throughout: it served more per second than at the light rate.
    assert heavy.output_throughput > 2 * light.output_throughput
