"""Arrival times of open-loop levels: seeded Poisson, and a trace replayed at any rate."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from autotune.bench.arrivals import TraceError, arrival_times, load_trace


def test_poisson_arrivals_are_the_same_for_every_trial_and_average_the_rate() -> None:
    a = arrival_times(5.0, 2000.0, seed=1)
    assert a == arrival_times(5.0, 2000.0, seed=1)
    assert a != arrival_times(5.0, 2000.0, seed=2)
    assert len(a) / 2000.0 == pytest.approx(5.0, rel=0.05)
    gaps = [b - x for x, b in itertools.pairwise(a)]
    # Exponential gaps: their sd equals their mean (a fixed-interval sender's would be 0).
    mean = sum(gaps) / len(gaps)
    sd = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
    assert sd == pytest.approx(mean, rel=0.1)
    assert all(0 <= t < 2000.0 for t in a) and a == sorted(a)


def test_a_trace_keeps_its_bursts_at_any_mean_rate(tmp_path: Path) -> None:
    # A burst of three, then a pause: 4 gaps over 4 s is 1 request/s.
    path = tmp_path / "trace.txt"
    path.write_text("# seconds\n10\n10.1\n10.2\n14\n\n12\n")
    trace = load_trace(path)
    assert trace.offsets == pytest.approx((0.0, 0.1, 0.2, 2.0, 4.0))
    assert trace.mean_rate == pytest.approx(1.0)
    doubled = arrival_times(2.0, 2.0, trace=trace)
    assert doubled == pytest.approx([0.0, 0.05, 0.1, 1.0])  # the same shape, twice as fast
    # Shorter than the level: repeated, one mean gap after its end.
    looped = arrival_times(1.0, 11.0, trace=trace)
    assert looped[5:] == pytest.approx([5.0, 5.1, 5.2, 7.0, 9.0, 10.0, 10.1, 10.2])
    assert len(arrival_times(1.0, 1000.0, trace=trace)) == 1000  # the mean rate asked


def test_a_trace_reads_mooncake_milliseconds_and_seconds_fields(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 1000, "input_length": 9}\n{"arrival_s": 3.5}\n')
    assert load_trace(path).offsets == pytest.approx((0.0, 2.5))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("1\n2\nlater\n", "t.txt:3: not an arrival time"),
        ('{"at": 1}\n', "t.txt:1: not an arrival time"),
        ("5\n", "at least two distinct arrival times"),
        ("5\n5\n", "at least two distinct arrival times"),
    ],
)
def test_a_bad_trace_names_its_file_and_line(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "t.txt"
    path.write_text(text)
    with pytest.raises(TraceError, match=problem):
        load_trace(path)
