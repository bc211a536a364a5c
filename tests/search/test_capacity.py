"""The capacity prediction: max_running_requests from the configs deployed so far."""

from __future__ import annotations

import random

import pytest

from autotune.search import capacity
from autotune.sim import model
from autotune.sim.profiles import PROFILES, get_profile
from autotune.space import load_space
from tests.helpers.e2e import REPO

EAGLE = load_space(REPO / "search_spaces" / "sglang-eagle.yaml")


def test_the_space_file_says_what_a_request_reserves() -> None:
    # SGLang 0.5.23: max(steps * topk, draft) per decode step, with its own rule applied first
    # (topk 1 -> steps + 1 drafts).
    def m(steps: int, topk: int, draft: int) -> float | None:
        return EAGLE.memory_tokens({"speculative_num_steps": steps,
                                    "speculative_eagle_topk": topk,
                                    "speculative_num_draft_tokens": draft})  # fmt: skip

    assert m(3, 4, 8) == 12  # the tree's width
    assert m(2, 4, 9) == 9  # the draft beyond it
    assert m(3, 1, 9) == 4  # a chain: steps + 1
    assert EAGLE.memory_tokens({"speculative_num_steps": 3}) is None


def test_the_fit_follows_a_pool_split_among_requests() -> None:
    # A pool of P tokens split as P / (slot + m): 1/running is linear in m.
    points = [(m, int(40000 / (1500 + 40 * m))) for m in (4, 8, 16, 30)]
    p = capacity.fit(points, 60)
    assert p is not None
    assert p.low <= 40000 / (1500 + 40 * 60) <= p.high
    # The most requests two configs ran is a cap, not memory: left out of the fit.
    capped = [(2, 48), (3, 48), *points]
    assert capacity.fit(capped, 60) == p
    assert capacity.fit(points[:2], 60) is None  # too few points to fit a line


@pytest.mark.parametrize("profile", list(PROFILES))
def test_no_feasible_config_is_ever_predicted_below_the_floor(profile: str) -> None:
    """Against the simulator's own memory model: whatever was deployed before, every config
    the prediction skips falls short (or is refused) when it is really started."""
    prof = get_profile(profile)
    configs = [c.params for c in EAGLE.enumerate() if c.valid]
    truth: dict[tuple, tuple[float, int]] = {}
    for c in configs:
        r = model.resolve(
            prof,
            model.Launch(
                prof.default_algorithm,
                c["speculative_num_steps"],
                c["speculative_eagle_topk"],
                c["speculative_num_draft_tokens"],
            ),
        )
        running = 0 if isinstance(r, model.Refusal) else r.max_running_requests
        m = EAGLE.memory_tokens(c)
        assert m is not None
        truth[EAGLE.key(c)] = (m, running)
    rng = random.Random(profile)
    floors = sorted({r for _, r in truth.values() if r > 0} | {16})
    skipped = 0
    for _ in range(200):
        floor = rng.choice(floors)
        seen = rng.sample(configs, rng.randint(3, 12))
        points = [truth[EAGLE.key(c)] for c in seen if truth[EAGLE.key(c)][1] > 0]
        for c in rng.sample(configs, 20):
            m, running = truth[EAGLE.key(c)]
            p = capacity.predict_from(points, m, floor)
            if p is not None:
                skipped += 1
                assert running < floor, (profile, c, floor, p)
    # Exercised where capacity varies (Qwen's hybrid attention); the other two profiles run
    # their 48-request cap with every config, so nothing falls short and nothing is skipped.
    varies = len({r for _, r in truth.values()}) > 2
    assert bool(skipped) == varies, skipped
