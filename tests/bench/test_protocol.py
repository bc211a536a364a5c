"""Reading recorded streams chunk by chunk, without a network."""

from __future__ import annotations

import pytest

from autotune.bench.protocol import (
    GenerateReader,
    StreamError,
    read_chat,
    read_completions,
    request_body,
)
from autotune.bench.record import RequestRecord
from autotune.bench.sse import SSEDecoder


def replay(body: bytes, reader=read_chat, gap: float = 0.01) -> RequestRecord:
    """Feed every event as if it arrived `gap` seconds after the previous one."""
    rec = RequestRecord(worker=0, seq=0, max_tokens=256)
    rec.start = 0.0
    t = 0.1
    for payload in SSEDecoder().feed(body):
        if reader(rec, payload, t):
            break
        t += gap
    rec.end = t
    return rec


def test_multi_token_chunks_count_the_server_usage(stream_bytes) -> None:
    rec = replay(stream_bytes("chat_multitoken.sse"))
    assert rec.done
    assert rec.completion_tokens == 17 and rec.prompt_tokens == 12
    assert len(rec.times) == 7, "seven chunks carried text; the role chunk carried none"
    rec.finalize(rec.completion_tokens)
    assert rec.output_tokens == 17
    assert rec.counts[0] == 1  # "Paris"
    assert all(n >= 1 for n in rec.counts)
    assert rec.text.startswith("Paris is the capital")
    assert rec.finish_reason == "stop"


def test_itl_spreads_a_chunk_gap_over_its_tokens(stream_bytes) -> None:
    rec = replay(stream_bytes("chat_multitoken.sse"), gap=0.03)
    rec.finalize(17)
    samples = rec.itl_samples()
    # One sample per chunk after the first, with multiplicity = its tokens.
    assert sum(n for _, n in samples) == 17 - rec.counts[0]
    for (value, n), count in zip(samples, rec.counts[1:], strict=True):
        assert n == count
        assert value == pytest.approx(0.03 / count)
    assert rec.tpot() == pytest.approx(0.03 * 6 / 16)


def test_missing_usage_is_recounted_from_text_not_max_tokens(stream_bytes) -> None:
    rec = replay(stream_bytes("chat_no_usage.sse"))
    assert rec.done and rec.completion_tokens is None
    rec.finalize(None)
    # At least one token per chunk with text, about four characters per token.
    assert 7 <= rec.output_tokens <= 20
    assert rec.output_tokens != rec.max_tokens


def test_early_stop_uses_usage_not_max_tokens(stream_bytes) -> None:
    rec = replay(stream_bytes("chat_early_stop.sse"))
    rec.finalize(rec.completion_tokens)
    assert rec.finish_reason == "stop"
    assert rec.output_tokens == 5 and rec.max_tokens == 256


def test_error_event_mid_stream_is_an_error(stream_bytes) -> None:
    with pytest.raises(StreamError, match="CUDA out of memory"):
        replay(stream_bytes("chat_error_event.sse"))


def test_malformed_chunk_is_a_clear_error(stream_bytes) -> None:
    with pytest.raises(StreamError, match="malformed chunk"):
        replay(stream_bytes("chat_malformed.sse"))


@pytest.mark.parametrize(
    "payload",
    [b"[1, 2]", b'{"choices": "x"}', b'{"choices": [{"delta": "x"}]}', b'{"usage": {"x": 1}}'],
)
def test_wrong_shapes_are_malformed(payload: bytes) -> None:
    rec = RequestRecord(0, 0, 8)
    with pytest.raises(StreamError, match="malformed"):
        read_chat(rec, payload, 0.0)


def test_nothing_is_read_after_done() -> None:
    body = (
        b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n'
        b'data: {"choices":[{"delta":{"content":"b"}}]}\n\n'
    )
    rec = replay(body)
    assert rec.done and rec.text == "a"


def test_reasoning_content_counts_as_output() -> None:
    rec = RequestRecord(0, 0, 8)
    read_chat(rec, b'{"choices":[{"delta":{"reasoning_content":"hmm, ","content":null}}]}', 1.0)
    read_chat(rec, b'{"choices":[{"delta":{"content":"yes"}}]}', 2.0)
    assert rec.text == "hmm, yes" and len(rec.times) == 2


def test_completions_with_crlf_and_comments(stream_bytes) -> None:
    rec = replay(stream_bytes("completions_crlf.sse"), reader=read_completions)
    assert rec.done and rec.completion_tokens == 12 and rec.finish_reason == "length"
    assert rec.text == " Once upon a time, in a small village there lived"


def test_native_generate_counts_are_exact_per_chunk(stream_bytes) -> None:
    rec = replay(stream_bytes("generate_native.sse"), reader=GenerateReader())
    assert rec.done and rec.exact
    assert rec.text == "Paris is the capital and largest city of France."
    rec.finalize(rec.completion_tokens)
    assert rec.counts == [1, 3, 3, 3]
    assert rec.spec_verify_ct == 3 and rec.finish_reason == "length"


def test_native_generate_incremental_text() -> None:
    reader = GenerateReader()
    rec = RequestRecord(0, 0, 8)
    for i, (text, n) in enumerate([("Hel", 1), ("lo w", 2), ("orld", 3)]):
        payload = f'{{"text": "{text}", "meta_info": {{"completion_tokens": {n}}}}}'
        reader(rec, payload.encode(), float(i))
    assert rec.text == "Hello world" and rec.weights == [1.0, 1.0, 1.0]


def test_native_generate_token_count_going_down_is_an_error() -> None:
    reader = GenerateReader()
    rec = RequestRecord(0, 0, 8)
    reader(rec, b'{"text": "a", "meta_info": {"completion_tokens": 3}}', 0.0)
    with pytest.raises(StreamError, match="went down"):
        reader(rec, b'{"text": "ab", "meta_info": {"completion_tokens": 2}}', 1.0)


def test_request_bodies() -> None:
    chat = request_body("chat", "hi", model="m", max_tokens=9, temperature=0.7, ignore_eos=False)
    assert chat["messages"] == [{"role": "user", "content": "hi"}]
    assert chat["stream"] and chat["stream_options"] == {"include_usage": True}
    assert "ignore_eos" not in chat
    msgs = ({"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"})
    comp = request_body(
        "completions", msgs, model=None, max_tokens=9, temperature=0.0, ignore_eos=True
    )
    assert comp["prompt"] == "be brief\n\nhi" and comp["ignore_eos"] is True
    assert "model" not in comp
    gen = request_body("generate", "hi", model="m", max_tokens=9, temperature=0, ignore_eos=True)
    assert gen == {
        "text": "hi",
        "sampling_params": {"max_new_tokens": 9, "temperature": 0, "ignore_eos": True},
        "stream": True,
    }
