"""A trial's open-loop levels: `benchmark.request_rate`, after the concurrency levels.

Rates run from the lowest up. A rate the server fell behind on (requests still waiting
when its drain ended) ends the climb: every higher rate only falls further behind, and
measuring it would cost GPU time for a known answer. With `objective.mode: max_rate`
the climb also stops at the first rate that misses the SLOs, and one more rate halfway
between the last that met them and that one sharpens the answer: a short search per
config whose time is the trial's, like every level's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune import log as alog
from autotune.bench.arrivals import Trace
from autotune.bench.open_loop import RateResult, RateSettings, Slo, goodput_summary, run_rate
from autotune.engines.base import ServerInfo
from autotune.log import get
from autotune.run.measuring import Measuring
from autotune.search import records
from autotune.search.objective import highest_meeting

if TYPE_CHECKING:
    from autotune.bench.deck import PromptDeck

log = get("autotune.run.rates")


def measure_rates(
    p: Measuring, info: ServerInfo, deck: PromptDeck, check_alive: Callable[[], None]
) -> list[RateResult]:
    """`check_alive` raises `ServerFailed` when the server died under a rate."""
    b, o = p.cfg.benchmark, p.cfg.objective
    trace = p.trace
    slo = Slo(o.slo.ttft_ms, o.slo.tpot_ms, o.slo.attainment)
    todo = list(b.request_rate)
    out: list[RateResult] = []
    while todo:
        rate = todo.pop(0)
        p.stop.check()  # a stop lets the running rate finish, never starts the next
        r = _one(p, info, deck, rate, trace, slo, f"{len(out) + 1}/{len(out) + 1 + len(todo)}")
        check_alive()
        out.append(r)
        fell_behind = r.unfinished > 0
        if o.mode == "max_rate" and not r.meets_slo:
            passed = [x.rate for x in out if x.meets_slo and x.rate < rate]
            if passed and len(out) == len(passed) + 1 and rate - passed[-1] > 0.05 * rate:
                todo = [round((passed[-1] + rate) / 2, 3)]
                continue
            todo = []
        elif fell_behind and not (o.mode == "goodput" and o.rate is not None and rate < o.rate):
            todo = []
    skipped = [x for x in b.request_rate if x > max(r.rate for r in out)]
    if skipped:
        log.info(
            "higher rates not measured: no config meets a rate above one it missed", skipped=skipped
        )
    log.info("rates done", goodput=goodput_summary(out))
    return out


def _one(
    p: Measuring,
    info: ServerInfo,
    deck: PromptDeck,
    rate: float,
    trace: Trace | None,
    slo: Slo,
    which: str,
) -> RateResult:
    b = p.cfg.benchmark
    url = p.url
    settings = RateSettings(
        rate=rate,
        duration_s=b.rate_duration,
        trace=trace,
        seed=p.cfg.study.seed or 0,
        slo=slo,
        server_slots=info.max_running_requests,
        time_scale=info.time_scale,
    )
    asyncio.run(p.engine.flush_cache(url, p.api_key))
    log.info("open-loop level", rate=f"{rate:g}/s", of=which, arrivals=b.arrivals)
    result = asyncio.run(
        run_rate(
            url,
            p.cfg.target.model,
            p.workload,
            settings,
            api_key=p.api_key,
            endpoint=b.endpoint,
            deck=deck,
            on_progress=_progress(which, rate),
        )
    )
    log.info(
        "rate done",
        rate=f"{rate:g}/s",
        goodput=round(result.goodput, 3),
        good=f"{result.good}/{result.sent}",
        meets_slo=result.meets_slo,
        ttft_ms_p99=None if result.ttft_ms_p99 is None else round(result.ttft_ms_p99),
        queued_max=result.queued_max,
    )
    return result


def _progress(which: str, rate: float) -> Any:
    last = [0.0]

    def note(s: dict[str, Any]) -> None:
        alog.progress(
            level=f"rate {which} ({rate:g}/s, {s['sent']}/{s['of']} sent)",
            tok_s=f"{s['in_flight']} in flight",
        )
        now = time.monotonic()
        if not alog.live() and now - last[0] >= 2.0:
            last[0] = now
            log.info("open loop", rate=f"{rate:g}/s", **{k: s[k] for k in ("sent", "done")})

    return note


def rate_attrs(rates: list[RateResult]) -> dict[str, Any]:
    """The trial's record of its open-loop levels: every figure, and goodput per rate as
    its own attribute (the dashboard sorts and filters by those)."""
    attrs: dict[str, Any] = {records.RATES: [r.to_dict() for r in rates]}
    for r in rates:
        attrs[f"{records.GOODPUT_AT}{r.rate:g}/s"] = round(r.goodput, 4)
    attrs[records.MAX_RATE_MEETING_SLO] = highest_meeting(attrs[records.RATES])
    attrs[records.RATES_S] = round(sum(r.duration_s for r in rates), 1)
    return attrs
