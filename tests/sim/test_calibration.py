"""docs/calibration.md, bullet by bullet, against the default profile's model.

The server and --predict use these same functions (test_throughput checks
that HTTP measurements agree with them), so asserting the model is asserting
the simulator.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache

import pytest

from autotune.sim import model
from autotune.sim.profiles import DEFAULT_PROFILE, get_profile

P = get_profile(DEFAULT_PROFILE)
LEVELS = (1, 16, 64)


def launch(steps: int, topk: int = 1, draft: int | None = None, **kw: object) -> model.Launch:
    return model.Launch(
        speculative_algorithm="EAGLE",
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=steps + 1 if draft is None else draft,
        **kw,  # type: ignore[arg-type]
    )


def resolved(lc: model.Launch) -> model.Resolved:
    r = model.resolve(P, lc)
    assert isinstance(r, model.Resolved), r
    return r


@cache
def tput(steps: int, concurrency: int, workload: str = "greedy", topk: int = 1,
         draft: int | None = None) -> float:  # fmt: skip
    r = resolved(launch(steps, topk, draft))
    return float(model.predict_level(P, r, concurrency, workload)["output_throughput"])


def space() -> list[tuple[int, int, int]]:
    """The full EAGLE space after SGLang's topk=1 rule (search_spaces/sglang-eagle.yaml)."""
    out = []
    for s in range(1, 9):
        for k in (1, 2, 4, 8):
            if k == 1:
                out.append((s, 1, s + 1))
                continue
            out += [(s, k, d) for d in range(2, min(64, s * k + 1) + 1)]
    return out


def valid_space() -> list[tuple[int, int, int]]:
    return [c for c in space() if isinstance(model.resolve(P, launch(*c)), model.Resolved)]


@pytest.mark.parametrize("steps, target", [(1, 123), (2, 186), (3, 234), (5, 264)])
def test_single_request_throughput_within_10pct(steps: int, target: float) -> None:
    got = tput(steps, 1)
    assert abs(got / target - 1) <= 0.10, f"steps {steps}: {got:.1f} tok/s vs {target} (±10 %)"


def test_steps_5_best_single_request_of_1_to_8() -> None:
    by_steps = {s: tput(s, 1) for s in range(1, 9)}
    best = max(by_steps, key=by_steps.__getitem__)
    assert best == 5, f"best steps at 1 request is {best}: {by_steps}"


def test_steps_4_between_3_and_5() -> None:
    assert tput(3, 1) < tput(4, 1) < tput(5, 1)


@pytest.mark.parametrize("concurrency, gain", [(16, 0.26), (64, 0.17)])
def test_steps_1_to_2_gain_within_8pp(concurrency: int, gain: float) -> None:
    got = tput(2, concurrency) / tput(1, concurrency) - 1
    assert abs(got - gain) <= 0.08, f"gain at {concurrency}: {got:+.1%} vs {gain:+.0%} (±8 pp)"


def test_64_concurrency_is_capped_by_max_running_requests() -> None:
    for steps, mrr in ((1, 26), (2, 21)):
        level = model.predict_level(P, resolved(launch(steps)), 64)
        assert level["batch"] == level["max_running_requests"] == mrr


@pytest.mark.parametrize("steps, tokens, mrr", [(1, 455_357, 26), (2, 377_207, 21)])
def test_capacity_within_1pct(steps: int, tokens: int, mrr: int) -> None:
    r = resolved(launch(steps))  # no --max-running-requests: the reset to 48 applies
    assert abs(r.max_total_num_tokens / tokens - 1) <= 0.01, r.max_total_num_tokens
    assert abs(r.max_running_requests / mrr - 1) <= 0.01, r.max_running_requests
    assert model.MAX_RUNNING_RESET_WARNING in r.warnings


def test_capacity_falls_as_steps_topk_and_draft_grow() -> None:
    chain = [resolved(launch(s)) for s in range(1, 9)]
    tokens = [r.max_total_num_tokens for r in chain]
    running = [r.max_running_requests for r in chain]
    assert tokens == sorted(tokens, reverse=True) and len(set(tokens)) == 8, tokens
    assert running == sorted(running, reverse=True) and running[-1] < running[1], running
    by_topk = [resolved(launch(4, k, 5)).max_total_num_tokens for k in (1, 2, 4, 8)]
    assert by_topk == sorted(by_topk, reverse=True) and len(set(by_topk)) == 4, by_topk
    # 0.5.23 allocates max(steps * topk, draft) per decode step: draft tokens cost memory
    # only beyond steps * topk.
    by_draft = [resolved(launch(4, 4, d)).max_total_num_tokens for d in (4, 8, 16, 17)]
    assert by_draft[0] == by_draft[1] == by_draft[2] > by_draft[3], by_draft


def test_a_large_request_cap_is_cut_to_half_the_tokens_not_refused() -> None:
    # 0.5.23 reserves no KV per running request at startup (resolve_max_num_reqs):
    # asking for more requests than the pool holds is capped, never out of memory.
    llama = get_profile("llama")
    r = model.resolve(llama, launch(8, 8, 64, max_running_requests=1_000_000))
    assert isinstance(r, model.Resolved)
    assert r.max_running_requests == r.max_total_num_tokens // 2


def test_hybrid_cap_is_the_mamba_cache_and_says_so() -> None:
    r = resolved(launch(2))
    line = model.MAMBA_CAP_WARNING.format(21, r.max_running_requests * 5 + 3, 5)
    assert [w.split(" (")[0] for w in r.pool_warnings] == [line.split(" (")[0]]
    assert "5 state slots per request" in r.pool_warnings[0]
    # Without the overlap scheduler SGLang picks no_buffer: 3 slots per request.
    sync = resolved(launch(2, disable_overlap_schedule=True))
    assert "3 state slots per request" in sync.pool_warnings[0] and not sync.overlap
    assert model.NON_OVERLAP_WARNING in sync.warnings
    # A cap the pool can hold is no mamba cap.
    assert resolved(launch(2, max_running_requests=8)).pool_warnings == ()


def test_best_steps_at_64_fewer_than_at_1() -> None:
    best1 = max(range(1, 9), key=lambda s: tput(s, 1))
    best64 = max(range(1, 9), key=lambda s: tput(s, 64))
    assert best64 < best1, (best1, best64)
    full = valid_space()
    top1 = max(full, key=lambda c: tput(c[0], 1, "greedy", c[1], c[2]))
    top64 = max(full, key=lambda c: tput(c[0], 64, "greedy", c[1], c[2]))
    assert top64[0] < top1[0], (top1, top64)


def test_natural_acceptance_lower_and_best_steps_below_5() -> None:
    for s in range(1, 9):
        spec = resolved(launch(s)).spec
        assert model.accept_length(P, spec, "natural") < model.accept_length(P, spec, "greedy")
    best = max(range(1, 9), key=lambda s: tput(s, 1, "natural"))
    assert best < 5, best


@pytest.mark.parametrize("workload", ["greedy", "natural"])
def test_topk_above_1_wins_at_low_and_loses_at_high_concurrency(workload: str) -> None:
    full = valid_space()

    def best(c: int, wide: bool) -> float:
        return max(tput(s, c, workload, k, d) for s, k, d in full if (k > 1) == wide)

    assert best(1, True) > best(1, False) * 1.02, "topk > 1 should win at 1 request"
    assert best(64, True) < best(64, False) * 0.98, "topk > 1 should lose at 64 requests"


def test_no_speculation_is_valid_slower_and_has_most_kv() -> None:
    base = resolved(model.Launch())
    assert not base.spec.on and base.algorithm is None
    assert model.predict_level(P, base, 1)["output_throughput"] < tput(1, 1)
    assert base.max_total_num_tokens > resolved(launch(1)).max_total_num_tokens
    assert base.max_running_requests > resolved(launch(1)).max_running_requests


def test_a_handful_of_corner_configs_run_out_of_memory() -> None:
    refused = [c for c in space() if isinstance(model.resolve(P, launch(*c)), model.Refusal)]
    corners = {(s, k) for s, k, _ in refused}
    assert 1 <= len(corners) <= 2, corners
    assert all(s * k >= 32 for s, k in corners), corners


def test_other_profiles_have_other_optima() -> None:
    best = {}
    for name in ("qwen3.5-122b-a10b-mtp", "llama3.1-8b-eagle3-h100", "deepseek-v3-mtp-8xh200"):
        prof = get_profile(name)
        top = {}
        for c in (1, 64):
            scores = {}
            for cfg in space():
                r = model.resolve(prof, launch(*cfg, max_running_requests=64))
                if isinstance(r, model.Resolved):
                    scores[cfg] = model.predict_level(prof, r, c)["output_throughput"]
            top[c] = max(scores, key=scores.__getitem__)
        best[name] = top
    optima = {v[1] for v in best.values()}
    assert len(optima) == 3, best
    assert len({v[64] for v in best.values()}) >= 2, best


def test_predict_cli_matches_model() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "autotune.sim", "--predict", "--speculative-algorithm", "EAGLE",
         "--speculative-num-steps", "2", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "3", "--concurrency", "1,16,64",
         "--input-len", "200"],  # the calibration runs' prompts (the CLI's default: 72)
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["concurrency"] for r in rows] == [1, 16, 64]
    for row, c in zip(rows, LEVELS, strict=True):
        assert row["valid"] is True
        assert row["output_throughput"] == pytest.approx(tput(2, c), rel=1e-6)
        r = resolved(launch(2))
        assert row["max_running_requests"] == r.max_running_requests == 21
        assert row["max_total_num_tokens"] == r.max_total_num_tokens


def test_predict_defaults_to_the_prompts_the_benchmark_sends() -> None:
    from autotune.bench.workload import load_workload
    from autotune.sim import api
    from autotune.sim.predict import benchmark_input_len

    prompts = load_workload("natural", max_tokens=1).prompts
    mean = sum(api.prompt_tokens(p) for p in prompts) / len(prompts)
    assert benchmark_input_len("natural") == round(mean) == 72
    # A chat prompt is counted as the server counts a chat request's messages.
    body = {"messages": [{"role": "user", "content": "x" * 40}], "max_tokens": 1}
    assert api.parse_chat(body).prompt_tokens == api.prompt_tokens("x" * 40) == 3 + 6 + 10
