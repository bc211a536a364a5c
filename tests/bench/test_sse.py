"""SSE decoding: events split anywhere across network reads come out whole."""

from __future__ import annotations

from autotune.bench.sse import SSEDecoder

from .conftest import STREAMS


def decode(pieces: list[bytes]) -> list[bytes]:
    dec = SSEDecoder()
    out: list[bytes] = []
    for piece in pieces:
        out.extend(dec.feed(piece))
    return out + dec.close()


def test_several_events_in_one_read() -> None:
    assert decode([b"data: a\n\ndata: b\n\ndata: [DONE]\n\n"]) == [b"a", b"b", b"[DONE]"]


def test_every_split_point_gives_the_same_events() -> None:
    for name in ("chat_multitoken.sse", "completions_crlf.sse", "generate_native.sse"):
        body = (STREAMS / name).read_bytes()
        whole = decode([body])
        assert whole[-1] == b"[DONE]"
        for cut in range(1, len(body)):
            assert decode([body[:cut], body[cut:]]) == whole, (name, cut)


def test_byte_by_byte() -> None:
    body = (STREAMS / "completions_crlf.sse").read_bytes()
    assert decode([body[i : i + 1] for i in range(len(body))]) == decode([body])


def test_crlf_split_between_cr_and_lf_is_not_an_extra_event() -> None:
    assert decode([b"data: x\r", b"\n\r", b"\ndata: y\r\n\r\n"]) == [b"x", b"y"]


def test_comments_event_and_id_fields_are_skipped() -> None:
    stream = b': ping\n\nevent: message\nid: 7\ndata: {"a":1}\n\nretry: 10\n\n'
    assert decode([stream]) == [b'{"a":1}']


def test_multi_line_data_is_joined_with_newline() -> None:
    assert decode([b"data: first\ndata: second\n\n"]) == [b"first\nsecond"]


def test_data_without_space_after_colon() -> None:
    assert decode([b"data:[DONE]\n\n"]) == [b"[DONE]"]


def test_unterminated_last_event_is_flushed_on_close() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"data: a\n\ndata: [DONE]") == [b"a"]
    assert dec.pending
    assert dec.close() == [b"[DONE]"]
