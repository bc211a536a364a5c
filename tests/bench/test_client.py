"""One request over real loopback HTTP, replaying recorded streams byte for byte."""

from __future__ import annotations

import asyncio

import pytest

from autotune.bench.client import Streamer, make_client
from autotune.bench.record import RequestRecord

from .sse_server import ReplayServer, running_server


def send(url: str, endpoint: str = "chat", timeout_s: float = 10.0) -> RequestRecord:
    async def go() -> RequestRecord:
        async with make_client(url, 1, api_key="sk-test", timeout_s=timeout_s) as client:
            streamer = Streamer(
                client, endpoint, model="m", temperature=0.7, ignore_eos=False, timeout_s=timeout_s
            )
            return await streamer.send(RequestRecord(0, 0, 256), "hello")

    return asyncio.run(go())


@pytest.mark.parametrize(
    "pieces",
    [None, [3], [200, 1, 1, 350], [101, 102, 103, 104, 105, 106, 107, 108, 109, 110]],
    ids=["whole", "tiny-first", "mid-event", "many"],
)
def test_chunks_split_across_tcp_reads(stream_bytes, pieces) -> None:
    with running_server(
        ReplayServer(stream_bytes("chat_multitoken.sse"), pieces=pieces).handle
    ) as url:
        rec = send(url)
    assert rec.ok, rec.error
    assert rec.done and rec.completion_tokens == 17
    assert (
        rec.text == "Paris is the capital and largest city of France. It lies on the Seine River."
    )
    assert rec.times == sorted(rec.times) and rec.ttft() is not None


def test_crlf_completions_split_inside_crlf(stream_bytes) -> None:
    body = stream_bytes("completions_crlf.sse")
    cut = body.index(b"\r\n\r\n", 40) + 1  # between \r and \n
    with running_server(ReplayServer(body, pieces=[cut]).handle) as url:
        rec = send(url, endpoint="completions")
    assert rec.ok, rec.error
    assert rec.completion_tokens == 12 and len(rec.times) == 5


def test_connection_cut_mid_stream_is_an_error(stream_bytes) -> None:
    with running_server(ReplayServer(stream_bytes("chat_cut.sse"), cut=True).handle) as url:
        rec = send(url)
    assert rec.error is not None and "connection error" in rec.error
    assert len(rec.times) == 4, "the chunks before the cut were still seen"


def test_stream_that_ends_without_done_or_finish_is_an_error(stream_bytes) -> None:
    with running_server(ReplayServer(stream_bytes("chat_cut.sse")).handle) as url:
        rec = send(url)
    assert rec.error == "stream ended inside an event (cut?)"


def test_error_event_mid_stream(stream_bytes) -> None:
    with running_server(ReplayServer(stream_bytes("chat_error_event.sse")).handle) as url:
        rec = send(url)
    assert rec.error is not None and "CUDA out of memory" in rec.error


def test_malformed_chunk(stream_bytes) -> None:
    with running_server(ReplayServer(stream_bytes("chat_malformed.sse")).handle) as url:
        rec = send(url)
    assert rec.error is not None and rec.error.startswith("malformed chunk")


def test_http_error_status() -> None:
    with running_server(ReplayServer(b"", status=404).handle) as url:
        rec = send(url)
    assert rec.error is not None and rec.error.startswith("HTTP 404 from /v1/chat/completions")
    assert "refused" in rec.error


def test_timeout(stream_bytes) -> None:
    slow = ReplayServer(stream_bytes("chat_multitoken.sse"), pieces=[600, 600], pause_s=2.0)
    with running_server(slow.handle) as url:
        rec = send(url, timeout_s=0.5)
    assert rec.error is not None and rec.error.startswith("timeout")


def test_native_generate(stream_bytes) -> None:
    with running_server(
        ReplayServer(stream_bytes("generate_native.sse"), pieces=[150]).handle
    ) as url:
        rec = send(url, endpoint="generate")
    assert rec.ok and rec.exact and rec.completion_tokens == 10 and rec.spec_verify_ct == 3


def test_clean_end_without_done_or_finish_reason_is_an_error(stream_bytes) -> None:
    body = stream_bytes("chat_multitoken.sse")
    three_events = b"".join(part + b"\n\n" for part in body.split(b"\n\n")[:3])
    with running_server(ReplayServer(three_events).handle) as url:
        rec = send(url)
    assert rec.error is not None and "before [DONE]" in rec.error
