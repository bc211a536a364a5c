"""Token attribution to the steady window, on hand-made records."""

from __future__ import annotations

import pytest

from autotune.bench.record import RequestRecord
from autotune.bench.window import (
    BURST_CAP_S,
    LiveRate,
    batch_throughputs,
    burst_end,
    input_tokens_in,
    tokens_in,
)


def record(times: list[float], counts: list[int], prompt: int = 10) -> RequestRecord:
    rec = RequestRecord(0, 0, 100)
    rec.start = times[0] - 0.1
    rec.end = times[-1]
    for t, n in zip(times, counts, strict=True):
        rec.add_tokens(t, n, "x" * 4 * n)
    rec.first_token_at = times[0]
    rec.prompt_tokens = prompt
    rec.finalize(sum(counts))
    return rec


def test_window_is_open_at_start_closed_at_end() -> None:
    rec = record([1.0, 2.0, 3.0, 4.0], [1, 3, 3, 3])
    assert tokens_in([rec], 1.0, 4.0) == 9  # the chunk at the start carries prefill output
    assert tokens_in([rec], 0.5, 4.0) == 10
    assert tokens_in([rec], 2.0, 3.5) == 3
    assert input_tokens_in([rec], 0.5, 4.0) == 10
    assert input_tokens_in([rec], 1.0, 4.0) == 0


def test_failed_requests_are_not_counted() -> None:
    rec = record([1.0, 2.0], [2, 2])
    rec.error = "cut"
    assert tokens_in([rec], 0.0, 5.0) == 0


def test_batches_partition_the_window() -> None:
    recs = [record([0.5 + 0.1 * i for i in range(40)], [3] * 40) for _ in range(3)]
    batches = batch_throughputs(recs, 0.0, 4.0, batches=8)
    width = 4.0 / 8
    assert sum(b * width for b in batches) == pytest.approx(tokens_in(recs, 0.0, 4.0))


def test_live_rate_learns_the_token_scale() -> None:
    live = LiveRate(origin=0.0)
    rec = RequestRecord(0, 0, 100)
    for i in range(20):
        rec.add_text(0.1 + 0.1 * i, "abcdefgh")  # weight 2 each
    live.feed(rec)
    rec.end = 2.1
    rec.finalize(60)  # the server said 3 tokens per chunk
    live.finish(rec)
    assert live.scale == pytest.approx(1.5)
    assert live.rate(0.0, 2.0) == pytest.approx(30.0, rel=0.1)


def test_a_window_edge_moves_to_the_end_of_its_delivery_burst() -> None:
    # Two server steps reach four streams each: read within 0.3 ms, 40 ms apart.
    times = [1.0, 1.0001, 1.0002, 1.0003, 1.04, 1.0401, 1.0402, 1.0403]
    assert burst_end(times, 1.0001) == 1.0003  # the rest of that step, not the next one
    assert burst_end(times, 1.0403) == 1.0403
    # Steps back to back leave no gap: the edge moves at most BURST_CAP_S.
    dense = [1.0 + i * 0.001 for i in range(100)]
    assert burst_end(dense, 1.0) == pytest.approx(1.0 + BURST_CAP_S, abs=0.0011)
