"""The llama.cpp adapter on logs and answers recorded from the real llama-server (b11434).

tests/data/llamacpp/*.log were written by the server itself (`llama-server ... 2> x.log`);
tests/llamacpp/ runs the same adapter against a live server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.engines import Counters, get_engine
from autotune.engines.llamacpp import LlamaCppEngine, parse_metrics, spec_types

DATA = Path(__file__).resolve().parents[1] / "data" / "llamacpp"


def log(name: str) -> str:
    return (DATA / name).read_text()


@pytest.mark.parametrize(
    ("name", "kind", "words"),
    [
        ("unknown-flag.log", "unsupported_flag", "does not accept --no-such-flag"),
        ("removed-flag.log", "unsupported_flag", "no longer accepts --draft-max"),
        ("bad-value.log", "refused", "--spec-ngram-mod-n-match: ngram size N must be between 1"),
        ("missing-model.log", "model_missing", "/nonexistent/model.gguf cannot be opened"),
        ("not-gguf.log", "model_load", "not a GGUF file"),
        ("synth-refused.log", "refused", "synthetic acceptance length must be finite"),
        ("synth-none.log", "refused", "requires an initialized speculative decoding context"),
    ],
)
def test_failures_are_named_from_the_servers_own_words(name: str, kind: str, words: str) -> None:
    failure = LlamaCppEngine().classify_failure(log(name), exit_code=1)
    assert failure.kind == kind
    assert words in failure.reason


def test_an_unsupported_flag_names_the_flag() -> None:
    assert LlamaCppEngine().classify_failure(log("removed-flag.log"), 1).flag == "--draft-max"


def test_a_live_server_that_never_got_ready_is_not_ready() -> None:
    failure = LlamaCppEngine().classify_failure(
        "0.00.002.837 I srv  llama_server: initializing ...\n", None
    )
    assert failure.kind == "not_ready"


def test_capacity_and_acceptance_from_a_served_log() -> None:
    engine = LlamaCppEngine()
    text = log("served-ngram.log")
    assert engine.ready_in_log(text)
    assert engine.capacity_from_log(text) == (4096, 4)  # 4 slots x 1024, not unified
    unified = (
        "I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 32768, kv_unified = 'true'"
    )
    assert engine.capacity_from_log(unified) == (32768, 4)
    accept = engine.accept_length_from_log(text)
    assert accept is not None and accept > 1.0


def test_accept_length_weights_requests_by_their_verify_steps() -> None:
    lines = (
        "slot print_timing: id  0 | task 1 | draft acceptance = 0.50000 (   10 accepted /    20 "
        "generated), mean len =  3.00\n"  # 5 steps
        "slot print_timing: id  1 | task 2 | draft acceptance = 0.10000 (    2 accepted /    20 "
        "generated), mean len =  1.10\n"  # 20 steps
    )
    assert LlamaCppEngine().accept_length_from_log(lines) == pytest.approx(1 + 12 / 25)


def test_metrics_in_scientific_notation_and_labelled_series() -> None:
    text = (
        "# TYPE llamacpp:tokens_predicted_total counter\n"
        "llamacpp:tokens_predicted_total 1.23457e+06\n"
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 5\n'
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 3\n'
    )
    m = parse_metrics(text)
    assert m["llamacpp:tokens_predicted_total"] == 1234570.0
    assert m["llamacpp:spec_decode_num_accepted_tokens_per_pos_total"] == 8.0


def test_counters_give_accept_length_and_acceptance() -> None:
    before = Counters(100, 40, 10, 10)
    after = Counters(300, 140, 70, 30)
    d = after.since(before)
    assert (d.output_tokens, d.draft_tokens, d.accepted_tokens, d.drafts) == (200, 100, 60, 20)
    assert d.accept_length == pytest.approx(4.0)
    assert d.acceptance == pytest.approx(0.6)
    assert Counters(0, 0, 0, 0).accept_length is None


def test_spec_types_as_the_server_lists_them() -> None:
    assert spec_types("none,ngram-mod") == "ngram-mod"
    assert spec_types("none") == "none"
    assert spec_types(None) == "none"


def test_engine_names() -> None:
    assert get_engine("llama.cpp").name == "llama.cpp"
    assert get_engine("llamacpp").name == "llama.cpp"


def test_flags_the_installed_server_does_not_have_from_its_help() -> None:
    help_text = log("help.txt")  # `llama-server --help` of b11434
    fine = ["--model", "--parallel", "--no-jinja", "--log-colors", "--spec-type",
            "--spec-ngram-mod-n-min", "--spec-ngram-map-k-size-m", "--spec-synth-len"]  # fmt: skip
    assert LlamaCppEngine().flag_problems(help_text, fine) == {}
    problems = LlamaCppEngine().flag_problems(help_text, ["--draft-max", "--bogus"])
    assert "no longer accepts it" in problems["--draft-max"]
    assert "does not list it" in problems["--bogus"]
