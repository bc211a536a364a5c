"""SGLang's 2026 speculative modes in the simulator: adaptive steps, spec v2 (overlap), NGRAM.

Each against the behaviour docs/rehearsal.md gives for it (read from SGLang's source):
the controller's thresholds, the refusals and fallback warnings, the memory reserved for
the largest candidate, and what /get_server_info reports.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from autotune.sim import adaptive, model
from autotune.sim.args import parse
from autotune.sim.profiles import get_profile
from tests.sim.conftest import StartSim

QWEN = get_profile("qwen")
LLAMA = get_profile("llama")


def resolve(*flags: str, profile=QWEN):  # type: ignore[no-untyped-def]
    return model.resolve(profile, parse(list(flags)).launch)


# -- the adaptive config and controller ----------------------------------------------------
def test_config_refusals_are_sglangs_own() -> None:
    cases = {
        "[1, 3]": ("ValueError", "speculative adaptive config must be a JSON object, got list"),
        '{"candidate_steps": [1, 3]}': ("ValueError", "at least one integer-string BS key"),
        '{"1": {"candidate_steps": [1, -3]}}': (
            "ValueError",
            "BS 1: candidate_steps must be a list of non-negative ints, got [1, -3]",
        ),
        '{"strategy": "fast", "1": {"candidate_steps": [1]}}': ("ValueError", "'strategy' must"),
        "{1: }": ("json.decoder.JSONDecodeError", "Expecting property name"),
    }
    for text, (exception, message) in cases.items():
        with pytest.raises(adaptive.ConfigRefused) as refused:
            adaptive.parse(text)
        assert refused.value.exception == exception and message in refused.value.message


def test_shared_keys_are_defaults_of_every_entry() -> None:
    cfg = adaptive.parse('{"ema_alpha": 0.5, "1": {"candidate_steps": [3, 1]}, '
                         '"16": {"candidate_steps": [2], "ema_alpha": 0.1}}')  # fmt: skip
    assert [(e.min_batch, e.candidates, e.ema_alpha) for e in cfg.entries] == [
        (1, (1, 3), 0.5),
        (16, (2,), 0.1),
    ]
    assert cfg.union == (1, 2, 3)


def test_a_batch_pads_to_a_graph_size_and_takes_the_entry_at_or_below() -> None:
    cfg = adaptive.parse(None)  # SGLang's default: 1, 8, 32, 64
    # Explicit capture sizes (--cuda-graph-bs-decode): 5 pads to 8, whose entry applies.
    sizes = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 200)
    assert [cfg.entry_for(b, sizes).min_batch for b in (1, 3, 7, 8, 9, 31, 33, 200)] == [
        1, 1, 8, 8, 8, 32, 32, 64,
    ]  # fmt: skip
    assert cfg.entry_for(5, sizes).min_batch == 8
    # SGLang 0.5.23's default: no padding, the batch's own size picks the entry.
    raw = adaptive.routing_sizes()
    assert [cfg.entry_for(b, raw).min_batch for b in (1, 5, 7, 8, 31, 32, 63, 64)] == [
        1, 1, 1, 8, 8, 32, 32, 64,
    ]  # fmt: skip


def test_the_controller_moves_on_its_thresholds_after_warmup() -> None:
    entry = adaptive.Entry(1, (1, 3, 5, 7))
    slot = adaptive.Slot(entry, 3)
    assert (slot.steps, slot.ema) == (3, 2.0)
    # 2.8 accepted drafts out of 3: above 3 - 0.5, so up to 5 at the first decision
    # (batch 15: 10 warm-up batches, then every 5th); not above 5 - 0.5, so no further.
    moves = [slot.observe(2.8) for _ in range(15)]
    assert moves[:14] == [None] * 14 and moves[14] == 5
    # Acceptance collapses: down while the EMA is at most the lower tier - 0.75.
    slot = adaptive.Slot(entry, 7)
    for _ in range(60):
        slot.observe(0.1)
    assert slot.steps == 1
    # From 0 steps nothing is learnt: it probes the next tier up.
    slot = adaptive.Slot(adaptive.Entry(1, (0, 1)), 0)
    for _ in range(15):
        slot.observe(0.0)
    assert slot.steps == 1


def test_a_slot_not_holding_the_launch_steps_starts_in_the_middle() -> None:
    assert adaptive.Slot(adaptive.Entry(8, (0, 1, 3)), 5).steps == 1
    assert adaptive.Slot(adaptive.Entry(8, (0, 1, 3)), 3).steps == 3


# -- launch rules --------------------------------------------------------------------------
def test_adaptive_without_steps_starts_in_the_middle_candidate(tmp_path: Path) -> None:
    path = tmp_path / "adaptive.json"
    path.write_text('{"1": {"candidate_steps": [1, 2, 4, 6]}}')
    r = resolve("--speculative-algorithm", "EAGLE", "--speculative-adaptive",
                "--speculative-adaptive-config", str(path))  # fmt: skip
    assert isinstance(r, model.Resolved) and r.adaptive is not None
    assert (r.spec.steps, r.spec.topk, r.spec.draft) == (4, 1, 5)


def test_initial_steps_outside_the_candidates_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "adaptive.json"
    path.write_text('{"1": {"candidate_steps": [1, 3, 7]}}')
    r = resolve("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "2",
                "--speculative-adaptive", "--speculative-adaptive-config", str(path))  # fmt: skip
    assert isinstance(r, model.Refusal) and r.stage == "args"
    assert r.reason == (
        "ValueError: --speculative-num-steps=2 is not in the adaptive config candidate_steps "
        "[1, 3, 7]. Pass one of those values."
    )


def test_a_missing_config_file_is_the_servers_file_not_found(tmp_path: Path) -> None:
    r = resolve("--speculative-algorithm", "EAGLE", "--speculative-adaptive",
                "--speculative-adaptive-config", str(tmp_path / "none.json"))  # fmt: skip
    assert isinstance(r, model.Refusal) and r.exception == "FileNotFoundError"


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
          "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6"),
         "speculative_eagle_topk=2 (only topk=1 is supported)"),
        (("--speculative-algorithm", "NGRAM"),
         "speculative_algorithm=NGRAM (only EAGLE/EAGLE3 are supported)"),
        (("--speculative-algorithm", "STANDALONE"),
         "speculative_algorithm=STANDALONE (only EAGLE/EAGLE3 are supported)"),
    ],
)  # fmt: skip
def test_unsupported_adaptive_falls_back_to_static_with_a_warning(
    flags: tuple[str, ...], reason: str
) -> None:
    r = resolve(*flags, "--speculative-adaptive")
    assert isinstance(r, model.Resolved) and r.adaptive is None
    assert model.ADAPTIVE_DISABLED_WARNING.format(reason=reason) in r.warnings


def test_memory_is_reserved_for_the_largest_candidate(tmp_path: Path) -> None:
    chain3 = ("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
              "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")  # fmt: skip
    static = resolve(*chain3)
    path = tmp_path / "a.json"
    path.write_text('{"1": {"candidate_steps": [1, 3, 7]}}')
    wide = resolve(*chain3, "--speculative-adaptive", "--speculative-adaptive-config", str(path))
    path.write_text('{"1": {"candidate_steps": [1, 3]}}')
    narrow = resolve(*chain3, "--speculative-adaptive", "--speculative-adaptive-config", str(path))
    steps7 = resolve("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "7",
                     "--speculative-num-draft-tokens", "8")  # fmt: skip
    assert isinstance(static, model.Resolved) and isinstance(wide, model.Resolved)
    assert isinstance(narrow, model.Resolved) and isinstance(steps7, model.Resolved)
    # Qwen (hybrid): every candidate's state is kept, so the pool is that of steps 7.
    assert wide.max_running_requests == steps7.max_running_requests < static.max_running_requests
    assert narrow.max_running_requests == static.max_running_requests


def test_spec_v2_overlaps_by_default_and_disable_overlap_schedule_turns_it_off() -> None:
    chain = ("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")  # fmt: skip
    v2 = resolve(*chain)
    sync = resolve(*chain, "--disable-overlap-schedule")
    assert isinstance(v2, model.Resolved) and isinstance(sync, model.Resolved)
    assert v2.overlap and model.NON_OVERLAP_WARNING not in v2.warnings
    assert not sync.overlap and model.NON_OVERLAP_WARNING in sync.warnings
    # 0.5.23 has only v2 workers: trees overlap too.
    tree = resolve(
        "--speculative-algorithm",
        "EAGLE",
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "2",
        "--speculative-num-draft-tokens",
        "6",
    )
    assert isinstance(tree, model.Resolved) and tree.overlap
    # Overlap hides host time: faster at every batch, most where scheduling costs most.
    for batch in (1, 16, 48):
        t1 = model.iteration_time(QWEN, sync.spec, batch, batch * 300.0)
        t2 = model.iteration_time(QWEN, v2.spec, batch, batch * 300.0, overlap=True)
        assert t2 < t1


def test_ngram_sets_topk_from_the_breadth_and_steps_from_the_draft() -> None:
    r = resolve("--speculative-algorithm", "NGRAM")
    assert isinstance(r, model.Resolved) and r.ngram is not None
    assert (r.spec.topk, r.spec.draft, r.spec.steps) == (10, 12, 1)
    assert model.NGRAM_DRAFT_WARNING in r.warnings and model.NGRAM_CHUNK_WARNING in r.warnings
    assert r.max_running_requests <= model.SPEC_DEFAULT_MAX_RUNNING
    # The tuned EAGLE knobs do not apply: topk and steps follow the NGRAM rules.
    r = resolve("--speculative-algorithm", "NGRAM", "--speculative-num-steps", "5",
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "16",
                "--speculative-ngram-max-bfs-breadth", "4")  # fmt: skip
    assert isinstance(r, model.Resolved)
    assert (r.spec.topk, r.spec.draft, r.spec.steps) == (4, 16, 4)
    bad = resolve("--speculative-algorithm", "NGRAM", "--speculative-ngram-max-trie-depth", "0")
    assert isinstance(bad, model.Refusal) and "max_trie_depth must be positive" in bad.reason


def test_ngram_accepts_more_on_repetitive_text_and_needs_no_draft_model() -> None:
    r = resolve("--speculative-algorithm", "NGRAM", profile=LLAMA)
    eagle = resolve("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
                    profile=LLAMA)  # fmt: skip
    assert isinstance(r, model.Resolved) and isinstance(eagle, model.Resolved)
    greedy = model.accept_length(LLAMA, r.spec, "greedy")
    natural = model.accept_length(LLAMA, r.spec, "natural")
    assert greedy > natural > 1.0
    # No draft weights nor draft KV: more room for KV than an EAGLE3 head.
    assert r.max_total_num_tokens > eagle.max_total_num_tokens


# -- served ----------------------------------------------------------------------------------
def _drive(url: str, seconds: float) -> None:
    body = {"messages": [{"role": "user", "content": "Count to a thousand."}],
            "max_tokens": 64, "temperature": 0, "ignore_eos": True}  # fmt: skip
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=30) as client:
        while time.monotonic() < deadline:
            assert client.post(url + "/v1/chat/completions", json=body).status_code == 200


def test_served_adaptive_switches_and_reports_its_live_tier(
    start_sim: StartSim, tmp_path: Path
) -> None:
    # Greedy text on the Qwen profile accepts 2.8 of 3 drafts: the controller goes 3 -> 5.
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps({"1": {"candidate_steps": [1, 3, 5]}}))
    sim = start_sim("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                    "--speculative-adaptive", "--speculative-adaptive-config", str(path),
                    "--sim-noise", "0", "--sim-seed", "2")  # fmt: skip
    log = sim.log
    assert "AdaptiveSpeculativeParams initialized: steps=3, candidate_steps=[1, 3, 5]" in log
    assert log.count("Built adaptive runtime state steps=") == 3
    _drive(sim.url, 2.0)
    info = httpx.get(sim.url + "/get_server_info").json()
    assert info["speculative_adaptive"] is True
    assert info["speculative_adaptive_config"] == str(path)
    assert info["speculative_num_steps"] == 3  # the launch's value
    assert info["internal_states"][0]["speculative_num_steps"] == 5  # the live tier
    assert "Adaptive spec params updated: steps 3 -> 5" in sim.log
    assert "Switch adaptive runtime state: steps 3 -> 5, draft_tokens 4 -> 6" in sim.log


def test_served_refusal_of_a_bad_adaptive_config(start_sim: StartSim, tmp_path: Path) -> None:
    path = tmp_path / "adaptive.json"
    path.write_text('{"candidate_steps": [1, 3, 7]}')  # the flat pre-2026-05 shape
    sim = start_sim("--speculative-algorithm", "EAGLE", "--speculative-adaptive",
                    "--speculative-adaptive-config", str(path), ready=False)  # fmt: skip
    assert sim.wait_exit() != 0
    assert "ValueError: speculative_adaptive_config must contain at least one integer" in sim.log


def test_served_ngram_and_spec_v2_report_as_sglang(start_sim: StartSim) -> None:
    sim = start_sim("--speculative-algorithm", "NGRAM", "--speculative-ngram-max-bfs-breadth",
                    "4", "--speculative-num-draft-tokens", "8")  # fmt: skip
    info = httpx.get(sim.url + "/get_server_info").json()
    assert info["speculative_algorithm"] == "NGRAM"
    assert (info["speculative_eagle_topk"], info["speculative_num_steps"]) == (4, 2)
    assert info["speculative_ngram_max_bfs_breadth"] == 4
    assert info["speculative_ngram_max_trie_depth"] == 18
    assert info["speculative_adaptive"] is False
    _drive(sim.url, 0.5)
    assert (
        httpx.get(sim.url + "/get_server_info").json()["internal_states"][0][
            "avg_spec_accept_length"
        ]
        > 1.0
    )


def test_served_overlap_is_the_default_and_the_flag_turns_it_off(start_sim: StartSim) -> None:
    chain = ("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
             "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")  # fmt: skip
    v2 = start_sim(*chain)
    sync = start_sim(*chain, "--disable-overlap-schedule")
    assert httpx.get(v2.url + "/server_info").json()["disable_overlap_schedule"] is False
    assert httpx.get(sync.url + "/server_info").json()["disable_overlap_schedule"] is True
    assert model.NON_OVERLAP_WARNING in sync.log and model.NON_OVERLAP_WARNING not in v2.log
    # The hybrid profile's running requests are the mamba cap, printed as 0.5.23 prints it.
    assert "by the mamba state cache" in v2.log and "5 state slots per request" in v2.log
    assert "3 state slots per request" in sync.log
