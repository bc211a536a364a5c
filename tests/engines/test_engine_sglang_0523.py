"""The SGLang adapter on what 0.5.x servers really print and serve: real log excerpts from
public threads (tests/data/sglang/real/), `/server_info`, `/metrics` counters, the
command-line record, and the supported-version warning."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
import structlog.testing

from autotune.engines import sglang as sglang_engine
from autotune.engines.sglang import SGLangEngine, launch_flags, mamba_cap
from autotune.unit.secrets import mask_command
from tests.engines.test_engine_sglang import EAGLE, Sim, start_sim  # noqa: F401  (fixture)

REAL = Path(__file__).parents[1] / "data" / "sglang" / "real"
engine = SGLangEngine()


def test_a_real_unknown_flag_stops_the_study() -> None:
    failure = engine.classify_failure((REAL / "unrecognized-sglang-12818.log").read_text(), 2)
    assert failure.kind == "unsupported_flag"
    assert failure.flag == "--reasoning_parser"


def test_a_real_speculative_refusal_without_a_traceback() -> None:
    log = (REAL / "speculative-valueerror-sglang-25116.log").read_text()
    failure = engine.classify_failure(log, 1)
    assert failure.kind == "refused" and "not compatible with radix cache" in failure.reason


def test_a_real_mamba_cap_limits_running_requests() -> None:
    log = (REAL / "mamba-cap-sglang-38846.log").read_text()
    assert mamba_cap(log) == 9
    capacity = (
        "[2026-09-10 10:00:00 TP0] max_total_num_tokens=120000, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=32, context_len=262144, "
        "available_gpu_mem=3.10 GB"
    )
    assert engine.capacity_from_log(log + capacity + "\n") == (120000, 9)


def test_real_decode_lines_give_their_accept_length() -> None:
    log = (REAL / "eagle3-decode-sglang-11948.log").read_text()
    assert engine.accept_length_from_log(log) == pytest.approx(
        (2.17 + 1.95 + 1.80 + 2.05 + 1.80) / 5
    )


def test_launch_command_is_read_and_secrets_never_kept() -> None:
    cmd = "--model-path m --speculative-num-steps 3 --api-key s3cret --enable-metrics --x=1"
    assert launch_flags(cmd) == {
        "--model-path": "m",
        "--speculative-num-steps": "3",
        "--api-key": "s3cret",
        "--enable-metrics": True,
        "--x": "1",
    }
    assert "s3cret" not in mask_command(cmd)
    assert "s3cret" not in mask_command("--admin-api-key=s3cret")
    assert "s3cret" not in mask_command("--hf-token s3cret --port 1")
    kept = "--speculative-num-draft-tokens 4 --ssl-keyfile k.pem"
    assert mask_command(kept) == kept
    assert launch_flags(None) is None


def test_a_version_outside_the_range_warns_once() -> None:
    sglang_engine._warned.discard("0.4.9")
    with structlog.testing.capture_logs() as logs:
        sglang_engine._warn_outside_range("0.4.9")
        sglang_engine._warn_outside_range("0.4.9")
        sglang_engine._warn_outside_range("0.5.23")
    warned = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert len(warned) == 1 and warned[0].startswith("SGLang 0.4.9 is outside the versions"), logs


def test_the_simulator_speaks_0523(start_sim) -> None:  # noqa: F811
    sim: Sim = start_sim([*EAGLE, "--speculative-eagle-topk", "1", "--enable-metrics"])
    assert sim.wait_healthy()
    info = asyncio.run(engine.server_info(sim.url, ["speculative_num_steps"], None))
    assert info.version == "0.5.23"
    assert info.launch_flags is not None and info.launch_flags["--speculative-num-steps"] == "2"
    # /server_info is asked, never the deprecated /get_server_info that warns on each call.
    assert "deprecated" not in sim.log()
    httpx.get(sim.url + "/get_server_info", timeout=5)
    assert "Endpoint '/get_server_info' is deprecated" in sim.log()

    before = asyncio.run(engine.counters(sim.url, None))
    body = {"text": "Tell me a story.", "sampling_params": {"max_new_tokens": 120}}
    replies = [httpx.post(sim.url + "/generate", json=body, timeout=30) for _ in range(3)]
    after = asyncio.run(engine.counters(sim.url, None))
    assert before is not None and after is not None
    level = after.since(before)
    tokens = sum(r.json()["meta_info"]["completion_tokens"] for r in replies)
    assert level.output_tokens == tokens
    assert level.accept_length is not None and 1.0 < level.accept_length <= 3.0


def test_without_metrics_counters_fall_back(start_sim) -> None:  # noqa: F811
    sim: Sim = start_sim(EAGLE)
    assert sim.wait_healthy()
    assert asyncio.run(engine.counters(sim.url, None)) is None
