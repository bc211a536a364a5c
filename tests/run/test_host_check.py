"""The verdict of `apply --check` (its run over SSH: tests/deploy/test_host_check_ssh.py)."""

from __future__ import annotations

import pytest

from autotune.run.host_check import Check, agreement
from autotune.search.pruning import START_SD, WINDOW_SD


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
