"""No level is served from what an earlier one taught the server.

A prompt sent twice to the same server is not a fresh measurement: SGLang's NGRAM drafts
it from its corpus of earlier answers (the simulator models that, and /flush_cache
empties it, as 0.5.23 does). A trial's warm-ups and levels draw from one deck
(bench/deck.py); the real llama-server's ngram-mod is in tests/llamacpp/.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from autotune.bench import LevelResult, LevelSettings, PromptDeck, load_workload, run_level
from autotune.bench.deck import varied
from tests.sim.conftest import StartSim

NGRAM = ("--speculative-algorithm", "NGRAM", "--sim-seed", "3", "--sim-noise", "0")


def test_a_deck_gives_every_prompt_once_then_varies_its_prefix() -> None:
    deck = PromptDeck(("a", "b", "c"))
    drawn = [deck.draw() for _ in range(7)]
    assert [p for p, _ in drawn[:3]] == ["a", "b", "c"]
    assert [again for _, again in drawn] == [False] * 3 + [True] * 4
    # Each pass starts differently, so no pass shares a cached prefix with another.
    second, third = drawn[3][0], drawn[6][0]
    assert second == varied("a", 2) and third == varied("a", 3)
    assert len({second, third, "a"}) == 3 and str(second).endswith("a")


def test_a_chat_prompt_varies_in_its_first_message_only() -> None:
    chat = ({"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"})
    out = varied(chat, 2)
    assert isinstance(out, tuple) and out[1] == chat[1] and out[0]["role"] == "system"
    assert out[0]["content"].endswith("be brief") and out[0]["content"] != "be brief"


def _level(url: str, deck: PromptDeck, seconds: float = 2.0) -> LevelResult:
    workload = load_workload("natural", max_tokens=64, seed=1)
    settings = LevelSettings(
        concurrency=4, min_duration_s=seconds, max_duration_s=seconds, ci_width=None
    )
    return asyncio.run(run_level(url, None, workload, settings, endpoint="generate", deck=deck))


def test_repeated_prompts_inflate_ngram_and_neither_the_deck_nor_a_flush_do(
    start_sim: StartSim,
) -> None:
    sim = start_sim(*NGRAM)
    prompts = load_workload("natural", max_tokens=64, seed=1).prompts
    trial = PromptDeck(prompts)
    first = _level(sim.url, trial, seconds=4.0)
    # What every level did before: the workload from the top, to a server that saw it (a
    # shorter level: every prompt of it was in the first).
    again = _level(sim.url, PromptDeck(prompts))
    # The trial's deck goes on where the first level stopped: prompts the server never had.
    fresh = _level(sim.url, trial)
    # And a flush makes the first prompts new to the server again.
    assert httpx.post(sim.url + "/flush_cache?timeout=5").status_code == 200
    flushed = _level(sim.url, PromptDeck(prompts))
    assert first.accept_length and again.accept_length and fresh.accept_length
    assert flushed.accept_length
    assert again.accept_length > 1.25 * first.accept_length, (first, again)
    assert fresh.accept_length == pytest.approx(first.accept_length, rel=0.1)
    assert flushed.accept_length == pytest.approx(first.accept_length, rel=0.1)
    assert first.prompts_repeated == fresh.prompts_repeated == 0
    stats = httpx.get(sim.url + "/sim/stats").json()
    assert stats["cache_flushes"] == 1


def test_a_flush_is_refused_while_requests_run_unless_it_may_wait(start_sim: StartSim) -> None:
    sim = start_sim(*NGRAM)

    async def flush_while_busy() -> tuple[int, int]:
        async with httpx.AsyncClient(base_url=sim.url, timeout=30) as client:
            body = {"text": "count to one hundred", "sampling_params": {"max_new_tokens": 400}}
            busy = asyncio.create_task(client.post("/generate", json=body))
            await asyncio.sleep(0.3)
            refused = (await client.post("/flush_cache")).status_code
            waited = (await client.post("/flush_cache?timeout=20")).status_code
            await busy
            return refused, waited

    assert asyncio.run(flush_while_busy()) == (400, 200)
