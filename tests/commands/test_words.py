"""Small words a person reads: a waiting trial's knob, a missed confidence target."""

from __future__ import annotations

from autotune.commands.status import short as _short
from autotune.run.level_log import pm as _pm


def test_a_waiting_trials_fraction_is_shown_to_three_digits() -> None:
    # Issue 48: a queued row showed `num_draft_tokens_frac=0.5149827442619735`.
    assert _short(0.5149827442619735) == "0.515"
    assert _short(4) == "4" and _short("EAGLE") == "EAGLE"


def test_a_missed_target_never_reads_as_the_target_itself() -> None:
    # Issue 48: `ci ±2.0%, target ±2.0%` was called missed; the digits that tell them apart.
    assert (_pm(0.0204, 0.02), _pm(0.02)) == ("±2.04%", "±2.0%")
    assert _pm(0.025, 0.02) == "±2.5%"
    assert _pm(None) == "±?"
