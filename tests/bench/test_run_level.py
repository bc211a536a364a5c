"""Whole levels against a real loopback server whose truth is known."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest

from autotune.bench import LevelFailed, LevelResult, LevelSettings, Workload, run_level

from .sse_server import ReplayServer, ServerConfig, ServerStats, running_server, server_process

PROMPTS = tuple(f"prompt number {i}" for i in range(50))


def workload(max_tokens: int = 60, ignore_eos: bool = True) -> Workload:
    return Workload("test", 0.7, ignore_eos, max_tokens, PROMPTS)


class Server:
    """A fake server process; `stats` holds its ledger once the level ran."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.stats = ServerStats()


def level(
    server: Server,
    concurrency: int,
    *,
    wl: Workload | None = None,
    endpoint: str = "chat",
    progress: list[dict[str, Any]] | None = None,
    give_up: Any = None,
    **settings: Any,
) -> LevelResult:
    settings.setdefault("min_duration_s", 1.0)
    settings.setdefault("max_duration_s", 3.0)
    settings.setdefault("ci_width", None)
    with server_process(server.config) as proc:
        try:
            return asyncio.run(
                run_level(
                    proc.url,
                    None,
                    wl or workload(),
                    LevelSettings(concurrency, **settings),
                    endpoint=endpoint,
                    on_progress=progress.append if progress is not None else None,
                    give_up=give_up,
                )
            )
        finally:
            server.stats = proc.stats()


def test_concurrency_is_honoured_and_slots_stay_busy_in_the_window() -> None:
    server = Server(ServerConfig(rate=150))
    res = level(server, 8)
    assert server.stats.max_active == 8
    busy = server.stats.mean_active(res.window_start_unix, res.window_end_unix)
    assert busy > 7.8, busy


def test_warmup_requests_are_not_measured() -> None:
    server = Server(ServerConfig(rate=200))
    res = level(server, 4, warmup_requests=6, warmup_max_tokens=5)
    reqs = server.stats.requests
    warm = [r for r in reqs if r["max_tokens"] == 5]
    assert len(warm) == 6
    assert all(r["end"] < res.window_start_unix for r in warm)
    assert res.requests == len(reqs) - 6 and res.warmup_requests == 6


def test_constant_rate_server_measures_its_rate_within_2_percent() -> None:
    # 16 streams x 100 tok/s each; a 0.6 s request cycle leaves ~1 ms turnaround.
    server = Server(ServerConfig(rate=100, tokens_per_chunk=(3,)))
    res = level(server, 16, min_duration_s=3.0)
    assert res.output_throughput == pytest.approx(1600, rel=0.02)
    truth = server.stats.tokens_between(res.window_start_unix, res.window_end_unix)
    assert res.output_tokens == pytest.approx(truth, rel=0.01)


def test_ramp_up_and_drain_are_excluded() -> None:
    # Prefills are serialized (30 ms each), so the 16 first tokens take ~0.5 s to
    # arrive, and the last requests drain one by one: both at less than 16 streams.
    server = Server(ServerConfig(rate=100, prefill_s=0.03))
    res = level(server, 16, min_duration_s=2.0)
    st = server.stats
    assert res.ramp_up_s > 0.45 and res.drain_s > 0.1
    assert st.mean_active(res.window_start_unix, res.window_end_unix) > 16 * 0.985
    truth = st.tokens_between(res.window_start_unix, res.window_end_unix)
    assert res.output_tokens == pytest.approx(truth, rel=0.01)
    measured = [r for r in st.requests if r["max_tokens"] != 16]  # warmup asks for 16
    first = min(r["start"] for r in measured)
    last = max(r["end"] for r in measured)
    naive = sum(r["tokens"] for r in measured) / (last - first)
    assert naive < 0.93 * res.output_throughput, "ramp-up and drain would have cost >7 %"


def test_itl_is_spread_over_the_tokens_of_a_chunk() -> None:
    server = Server(ServerConfig(rate=200, tokens_per_chunk=(4,)))
    res = level(server, 2, wl=workload(max_tokens=80))
    assert res.tokens_per_chunk == pytest.approx(4.0, rel=0.02)
    assert res.itl_ms_p50 == pytest.approx(5.0, rel=0.1), "20 ms per 4-token chunk = 5 ms/token"
    assert res.tpot_ms_p50 == pytest.approx(5.0, rel=0.1)


def test_missing_usage_falls_back_to_text_recount_with_a_warning() -> None:
    server = Server(ServerConfig(rate=200, usage=False))
    res = level(server, 2)
    assert res.usage_source == "text-recount"
    assert any("no token counts" in note for note in res.notes)
    truth = server.stats.tokens_between(res.window_start_unix, res.window_end_unix)
    assert res.output_tokens == pytest.approx(truth, rel=0.02)


def test_early_stop_counts_what_was_generated_not_max_tokens() -> None:
    server = Server(ServerConfig(rate=200, output_tokens=20))
    res = level(server, 2, wl=workload(max_tokens=100, ignore_eos=False))
    assert res.mean_output_tokens == pytest.approx(20, abs=1)
    assert res.finished_by_length < 0.1
    truth = server.stats.tokens_between(res.window_start_unix, res.window_end_unix)
    # A one-second window of ~480 tokens: at each edge the server's clock and the
    # client's may put a token of each stream on opposite sides (seen: 472 vs 477).
    assert res.output_tokens == pytest.approx(truth, abs=2 * 2 * 2)


def test_native_generate_endpoint_reads_meta_info_and_acceptance() -> None:
    server = Server(ServerConfig(rate=200, tokens_per_chunk=(3,)))
    res = level(server, 2, endpoint="generate")
    assert res.usage_source == "meta_info"
    assert res.accept_length == pytest.approx(3.0, rel=0.01)
    truth = server.stats.tokens_between(res.window_start_unix, res.window_end_unix)
    assert res.output_tokens == pytest.approx(truth, rel=0.01)


def test_completions_endpoint() -> None:
    server = Server(ServerConfig(rate=200))
    res = level(server, 2, endpoint="completions")
    assert res.usage_source == "usage" and res.errors == 0
    assert {r["path"] for r in server.stats.requests} == {"/v1/completions"}


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("error_event", "injected error"), ("malformed", "malformed chunk"), ("cut", "connection")],
)
def test_a_few_errors_are_counted_and_reported(mode: str, reason: str) -> None:
    server = Server(ServerConfig(rate=400, fail_every=15, fail_mode=mode))
    res = level(server, 4, max_error_share=0.2)
    assert res.errors >= 1
    assert any(reason in key for key in res.error_reasons)
    assert 0 < res.error_share < 0.2


def test_too_many_errors_fail_the_level_with_the_partial_result() -> None:
    server = Server(ServerConfig(rate=400, fail_every=5, fail_mode="http500"))
    with pytest.raises(LevelFailed) as info:
        level(server, 4)
    assert "HTTP 500" in info.value.reason and "more than 5%" in info.value.reason
    assert info.value.result is not None and info.value.result.errors > 0


def test_unreachable_server_fails_fast() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(LevelFailed, match=r"warmup failed.*connection error"):
        asyncio.run(run_level(f"http://127.0.0.1:{port}", "m", workload(), LevelSettings(4)))
    assert time.monotonic() - start < 5


def test_refusing_server_names_the_http_status() -> None:
    refusing = ReplayServer(b"", status=404)
    with running_server(refusing.handle) as url, pytest.raises(LevelFailed, match="HTTP 404"):
        asyncio.run(run_level(url, "m", workload(), LevelSettings(2)))


def test_progress_is_reported_about_once_a_second() -> None:
    progress: list[dict[str, Any]] = []
    level(Server(ServerConfig(rate=200)), 2, progress=progress)
    measuring = [p for p in progress if p["phase"] == "measuring"]
    assert progress[0]["phase"] == "warmup"
    assert 1 <= len(measuring) <= 4
    assert {"elapsed_s", "requests", "tok_s", "ci", "window_s"} <= set(measuring[-1])


def test_without_ci_target_the_window_is_min_duration() -> None:
    res = level(Server(ServerConfig(rate=300)), 2, wl=workload(max_tokens=30))
    assert 1.0 <= res.window_s < 1.0 + 0.1 + 0.25  # + one request (0.1 s) + a monitor tick
    assert not res.ci_target_met


def test_ci_target_stops_early_on_a_steady_server() -> None:
    server = Server(ServerConfig(rate=200))
    res = level(server, 8, min_duration_s=1.0, max_duration_s=10.0, ci_width=0.03)
    assert res.ci_target_met and res.ci_halfwidth <= 0.03
    assert res.window_s < 5.0


def test_a_window_that_shows_the_config_cannot_win_ends_at_min_duration() -> None:
    # The CI target is out of reach (±0.01 %), so only give_up can end the window early.
    asked: list[tuple[float, float]] = []

    def slower_than_1000(tok_s: float, ci: float) -> bool:
        asked.append((tok_s, ci))
        return tok_s < 1000.0

    settings = {"min_duration_s": 1.0, "max_duration_s": 4.0, "ci_width": 0.0001}
    res = level(Server(ServerConfig(rate=200)), 2, give_up=slower_than_1000, **settings)
    assert res.cut_short and res.window_s < 1.0 + 0.1 + 0.3  # + a request + a monitor tick
    assert asked and 0.8 * 400 < asked[-1][0] < 1.2 * 400  # two streams at 200 tok/s each
    assert 0 < asked[-1][1] < 1
    # A window that never shows it runs on as the stopping rule says.
    res = level(Server(ServerConfig(rate=200)), 2, give_up=lambda _t, _c: False, **settings)
    assert not res.cut_short and res.window_s >= 4.0


def test_degenerate_output_is_flagged() -> None:
    res = level(Server(ServerConfig(rate=400, repeat_text=True)), 2)
    assert res.degenerate_share == 1.0


def test_result_is_json_safe() -> None:
    import json

    res = level(Server(ServerConfig(rate=300)), 1, min_duration_s=1.0)
    data = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert data["concurrency"] == 1 and data["usage_source"] == "usage"
    assert "steady state" in data["window"]
