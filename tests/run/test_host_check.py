"""The verdict of `apply --check` (its run over SSH: tests/deploy/test_host_check_ssh.py)."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.run.host_check import Check
from autotune.search.pruning import START_SD, WINDOW_SD, agreement


def test_two_single_starts_agree_within_both_windows_and_two_starts_spread() -> None:
    # Two windows at the default 2 % target and two starts of 2 % each: ±6.2 %.
    assert agreement(0.02, 0.02) == pytest.approx(0.0622, abs=1e-4)
    # A window with no interval recorded counts as one that met the target.
    both = 2 * WINDOW_SD**2 + 2 * START_SD**2
    assert agreement(None, None) == pytest.approx(1.96 * both**0.5)
    # A wide window widens it: a host measured badly is not called different.
    assert agreement(0.10, 0.02) > 0.10


def test_holds_is_the_difference_within_the_margin_either_way() -> None:
    base = {"trial": 4, "metric": "output_tok_s@c4", "earlier": 100.0, "earlier_host": "gpu1",
            "margin": 0.06}  # fmt: skip
    assert Check(**base, here=105.9).holds and Check(**base, here=94.1).holds
    assert not Check(**base, here=106.5).holds  # faster is another world too
    assert not Check(**base, here=93.5).holds
    down = Check(**base, here=None, why_not="it did not run: crashed")
    assert not down.holds


def test_the_sentence_gives_both_figures_and_the_way_to_tune_a_host_that_differs() -> None:
    from types import SimpleNamespace

    cfg: Any = SimpleNamespace(worker="gpu4", study=SimpleNamespace(name="qwen-spec"))
    base = {"trial": 12, "metric": "output_tok_s@c16", "earlier": 1498.0, "earlier_host": "gpu1",
            "margin": 0.062}  # fmt: skip
    assert Check(**base, here=1512.3).sentence(cfg) == (
        "gpu4: trial 12's config holds here: output_tok_s@c16 1512.3 against 1498.0 measured "
        "on gpu1 (+1.0 %; one start each agrees within ±6.2 %)"
    )
    slow = Check(**base, here=1300.0).sentence(cfg)
    assert slow.startswith("gpu4: trial 12's config does not hold here: output_tok_s@c16 1300.0")
    assert slow.endswith(
        "To tune gpu4 from the study: autotune start --worker gpu4 --study qwen-spec-gpu4 "
        "--from qwen-spec"
    )
