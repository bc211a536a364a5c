"""The HTTP API and log lines of a running simulator, as autotune will read them."""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest

from tests.sim.conftest import SimProc, StartSim

SPEC = ("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "8")  # fmt: skip
TS = r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}( TP0)?\] "


@pytest.fixture(scope="module")
def sim(start_module_sim: StartSim) -> SimProc:
    """Speculation on, draft tokens to be adjusted, no --max-running-requests, metrics on."""
    return start_module_sim(*SPEC, "--enable-metrics", "--sim-seed", "1", "--tp", "4",
                            "--trust-remote-code")  # fmt: skip


def chat_body(max_tokens: int = 32, **kw: object) -> dict:
    return {
        "messages": [{"role": "user", "content": "Tell me about speculative decoding. " * 5}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        **kw,
    }


def sse_events(resp: httpx.Response) -> list[bytes]:
    return [e[6:] for e in resp.content.split(b"\n\n") if e.startswith(b"data: ")]


def test_server_info_reports_resolved_args(sim: SimProc) -> None:
    info = httpx.get(sim.url + "/get_server_info").json()
    assert info["speculative_algorithm"] == "EAGLE"
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"]) == (3, 1)
    assert info["speculative_num_draft_tokens"] == 4  # adjusted from 8: topk is 1
    assert info["max_running_requests"] == 18  # reset to 48, then lowered by memory
    assert info["max_total_num_tokens"] > 0 and info["max_req_input_len"] > 0
    assert info["mem_fraction_static"] > 0 and info["version"]
    state = info["internal_states"][0]
    assert state["avg_spec_accept_length"] > 1  # the warmup counts, as in SGLang
    assert "last_gen_throughput" in state
    assert httpx.get(sim.url + "/server_info").json()["max_running_requests"] == 18


def test_startup_log_lines(sim: SimProc) -> None:
    log = sim.log
    assert log.count("does not model these flags") == 1
    assert re.search(r"ignores them: --tp, --trust-remote-code\n", log)
    assert (
        "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
        "speculative_eagle_topk == 1" in log
    )
    assert "Max running requests is reset to 48 for speculative decoding" in log
    for pat in (r"Load weight begin\. avail mem=[\d.]+ GB",
                r"Loading safetensors checkpoint shards: +\d+% Completed \| \d+/39 \[",
                r"Load weight end\. type=\w+, dtype=torch\.bfloat16",
                r"KV Cache is allocated\. #tokens: \d+, K size: [\d.]+ GB, V size: [\d.]+ GB",
                "The server is fired up and ready to roll!"):  # fmt: skip
        assert re.search(pat, log), pat
    cap = re.search(
        TS + r"max_total_num_tokens=(\d+), chunked_prefill_size=8192, max_prefill_tokens=16384, "
        r"max_running_requests=(\d+), context_len=262144, available_gpu_mem=[\d.]+ GB\n",
        log,
    )
    assert cap and cap.group(3) == "18"
    info = httpx.get(sim.url + "/get_server_info").json()
    assert int(cap.group(2)) == info["max_total_num_tokens"]
    assert log.index("max_total_num_tokens=") < log.index("Uvicorn running on")


def test_models_and_model_info(sim: SimProc) -> None:
    models = httpx.get(sim.url + "/v1/models").json()
    assert models["data"][0]["id"] and models["data"][0]["max_model_len"] == 262144
    info = httpx.get(sim.url + "/get_model_info").json()
    assert info["is_generation"] is True and info["model_path"]


def test_chat_stream_chunks_and_usage(sim: SimProc) -> None:
    body = chat_body(64, stream=True, stream_options={"include_usage": True})
    r = httpx.post(sim.url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["transfer-encoding"] == "chunked"
    events = sse_events(r)
    assert events[-1] == b"[DONE]"
    objs = [json.loads(e) for e in events[:-1]]
    assert objs[0]["choices"][0]["delta"]["role"] == "assistant"
    content = [o for o in objs if o["choices"] and o["choices"][0]["delta"].get("content")]
    words = [len(o["choices"][0]["delta"]["content"].split()) for o in content]
    assert sum(words) == 64 and max(words) > 1, words  # one word per token; >1 per verify step
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    usage = objs[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 64
    u = usage["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + 64


def test_stream_without_include_usage_has_no_usage(sim: SimProc) -> None:
    r = httpx.post(sim.url + "/v1/completions", timeout=30,
                   json={"prompt": "hello", "max_tokens": 10, "stream": True, "temperature": 0,
                         "ignore_eos": True})  # fmt: skip
    objs = [json.loads(e) for e in sse_events(r)[:-1]]
    assert all(o["usage"] is None for o in objs)
    assert "".join(o["choices"][0]["text"] for o in objs).count(" ") == 10


def test_non_streaming_chat_and_completions(sim: SimProc) -> None:
    r = httpx.post(sim.url + "/v1/chat/completions", json=chat_body(20), timeout=30).json()
    assert r["object"] == "chat.completion" and r["usage"]["completion_tokens"] == 20
    assert r["choices"][0]["finish_reason"] == "length"
    assert len(r["choices"][0]["message"]["content"].split()) == 20
    body = {"prompt": "x", "max_tokens": 7, "temperature": 0, "ignore_eos": True}
    r = httpx.post(sim.url + "/v1/completions", timeout=30, json=body)
    assert r.json()["usage"]["completion_tokens"] == 7


def test_natural_requests_stop_at_eos_with_varied_lengths(sim: SimProc) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 250,
            "temperature": 0.8}  # fmt: skip

    async def run() -> list[dict]:
        async with httpx.AsyncClient(timeout=60) as c:
            calls = [c.post(sim.url + "/v1/chat/completions", json=body) for _ in range(14)]
            return [r.json() for r in await asyncio.gather(*calls)]

    replies = asyncio.run(run())
    lengths = [r["usage"]["completion_tokens"] for r in replies]
    reasons = {r["choices"][0]["finish_reason"] for r in replies}
    assert len(set(lengths)) >= 5 and "stop" in reasons, lengths
    assert all(1 <= n <= 250 for n in lengths)
    words = " ".join(r["choices"][0]["message"]["content"] for r in replies).split()
    assert len(set(words)) > 50, "sampled text is varied"


def test_native_generate_meta_info(sim: SimProc) -> None:
    sampling = {"max_new_tokens": 40, "temperature": 0, "ignore_eos": True}
    body = {"text": "The capital of France is", "sampling_params": sampling}
    r = httpx.post(sim.url + "/generate", json=body, timeout=30).json()
    meta = r["meta_info"]
    assert meta["completion_tokens"] == 40 and meta["prompt_tokens"] > 0
    assert meta["finish_reason"] == {"type": "length", "length": 40}
    assert 40 / 4 <= meta["spec_verify_ct"] < 40  # accept length in [1, steps + 1]
    assert len(r["text"].split()) == 40
    words = r["text"].split()
    assert len(set(words)) < len(words) / 2, "greedy text is repetitive"


def test_native_generate_stream_counts_several_tokens_per_chunk(sim: SimProc) -> None:
    sampling = {"max_new_tokens": 50, "temperature": 0, "ignore_eos": True}
    body = {"text": "hi", "stream": True, "sampling_params": sampling}
    events = sse_events(httpx.post(sim.url + "/generate", json=body, timeout=30))
    assert events[-1] == b"[DONE]"
    metas = [json.loads(e)["meta_info"] for e in events[:-1]]
    counts = [m["completion_tokens"] for m in metas]
    steps = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    assert counts[-1] == 50 and max(steps) > 1 and min(steps) >= 1
    assert metas[-1]["finish_reason"]["type"] == "length"
    assert metas[-1]["spec_verify_ct"] == len(events) - 2  # the prefill chunk is not a verify


def test_sim_stats_agree_with_client_counts(sim: SimProc) -> None:
    before = httpx.get(sim.url + "/sim/stats").json()
    got_out = got_prompt = 0
    with httpx.Client(timeout=30) as c:
        for n in (5, 17, 33):
            body = chat_body(n, stream=True, stream_options={"include_usage": True})
            usage = json.loads(sse_events(c.post(sim.url + "/v1/chat/completions", json=body))[-2])
            got_out += usage["usage"]["completion_tokens"]
            got_prompt += usage["usage"]["prompt_tokens"]
    after = httpx.get(sim.url + "/sim/stats").json()
    assert after["requests"]["finished"] - before["requests"]["finished"] == 3
    assert after["output_tokens"] - before["output_tokens"] == got_out == 55
    assert after["prompt_tokens"] - before["prompt_tokens"] == got_prompt
    assert after["verify_steps"] > before["verify_steps"]
    assert after["time"]["monotonic"] > before["time"]["monotonic"]
    assert after["ring"][-1][1] == after["output_tokens"]


def test_metrics_when_enabled(sim: SimProc) -> None:
    with httpx.Client(timeout=30) as c:
        for _ in range(3):  # at least 40 decode iterations, so a logging interval passes
            c.post(sim.url + "/v1/chat/completions", json=chat_body(200))
    text = httpx.get(sim.url + "/metrics").text
    for name in ("sglang:spec_accept_length", "sglang:spec_accept_rate",
                 "sglang:num_running_reqs", "sglang:gen_throughput"):  # fmt: skip
        assert re.search(rf"^{name}\{{[^}}]*\}} [\d.]+$", text, re.M), name
    accept = float(re.search(r"^sglang:spec_accept_length\{.*\} ([\d.]+)$", text, re.M)[1])
    assert 1 < accept <= 4


def test_decode_log_line_format(sim: SimProc) -> None:
    deadline = time.monotonic() + 10
    pat = re.compile(
        TS + r"Decode batch, #running-req: \d+, #token: \d+, token usage: \d\.\d\d, "
        r"accept len: \d\.\d\d, accept rate: \d\.\d\d, cuda graph: True, "
        r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: \d+, \n"
    )
    while not pat.search(sim.log) and time.monotonic() < deadline:
        httpx.post(sim.url + "/v1/chat/completions", json=chat_body(200), timeout=30)
    assert pat.search(sim.log)
    assert re.search(TS + r"Prefill batch, #new-seq: \d+, #new-token: \d+, ", sim.log)


def test_errors(sim: SimProc) -> None:
    assert httpx.get(sim.url + "/nope").status_code == 404
    assert httpx.get(sim.url + "/v1/chat/completions").status_code == 405
    r = httpx.post(sim.url + "/v1/chat/completions", content=b"{not json",
                   headers={"content-type": "application/json"})  # fmt: skip
    assert r.status_code == 400 and "JSON" in r.json()["message"]
    r = httpx.post(sim.url + "/v1/chat/completions", json={"messages": []})
    assert r.status_code == 400
    r = httpx.post(sim.url + "/v1/chat/completions", json=chat_body(-3))
    assert r.status_code == 400


def test_client_disconnect_frees_the_slot(sim: SimProc) -> None:
    before = httpx.get(sim.url + "/sim/stats").json()
    body = chat_body(20000, stream=True)
    with httpx.stream("POST", sim.url + "/v1/chat/completions", json=body, timeout=30) as r:
        next(r.iter_bytes())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        stats = httpx.get(sim.url + "/sim/stats").json()
        if stats["requests"]["aborted"] > before["requests"]["aborted"]:
            break
        time.sleep(0.05)
    assert stats["requests"]["aborted"] == before["requests"]["aborted"] + 1
    assert stats["requests"]["running"] == 0


def test_keep_alive_serves_many_requests_on_one_connection(sim: SimProc) -> None:
    with httpx.Client(timeout=10) as c:
        for _ in range(20):
            assert c.get(sim.url + "/health").status_code == 200


def test_health_503_then_200_while_port_opens(start_sim: StartSim) -> None:
    sim = start_sim(*SPEC, "--sim-load-time", "3", ready=False)
    seen: list[int | None] = []
    models_while_starting = None
    deadline = time.monotonic() + 30
    with httpx.Client(timeout=2) as c:
        while time.monotonic() < deadline:
            try:
                code: int | None = c.get(sim.url + "/health").status_code
            except httpx.TransportError:
                code = None
            if not seen or seen[-1] != code:
                seen.append(code)
            if code == 200:
                break
            if code == 503 and models_while_starting is None:
                models_while_starting = c.get(sim.url + "/v1/models").status_code
            time.sleep(0.005)
    assert seen == [None, 503, 200], seen
    assert models_while_starting == 200  # answers before warmup ends: not a readiness signal


def test_no_speculation_and_explicit_max_running_requests(start_sim: StartSim) -> None:
    sim = start_sim("--max-running-requests", "10", "--sim-seed", "2")
    info = httpx.get(sim.url + "/get_server_info").json()
    assert info["speculative_algorithm"] is None and info["max_running_requests"] == 10
    assert "avg_spec_accept_length" not in info["internal_states"][0]
    assert "reset to 48" not in sim.log
    body = {"text": "x", "sampling_params": {"max_new_tokens": 9, "temperature": 0,
                                             "ignore_eos": True}}  # fmt: skip
    meta = httpx.post(sim.url + "/generate", json=body, timeout=30).json()["meta_info"]
    assert meta["completion_tokens"] == 9 and "spec_verify_ct" not in meta
    assert httpx.get(sim.url + "/metrics").status_code == 404


def test_api_key(start_sim: StartSim) -> None:
    """Guarded as SGLang 0.5.23 guards (sglang/srt/utils/auth.py, decide_request_auth): every
    path but those starting /health, /ready or /metrics, and no OPTIONS."""
    sim = start_sim(*SPEC, "--api-key", "s3cret", "--enable-metrics")
    for path in ("/health", "/health_generate", "/ready", "/metrics"):
        assert httpx.get(sim.url + path).status_code == 200, path
    assert httpx.options(sim.url + "/v1/models").status_code != 401
    assert httpx.get(sim.url + "/v1/models").status_code == 401
    assert httpx.post(sim.url + "/flush_cache").status_code == 401
    assert httpx.post(sim.url + "/v1/chat/completions", json=chat_body(4)).status_code == 401
    bad = {"Authorization": "Bearer wrong"}
    assert httpx.get(sim.url + "/get_server_info", headers=bad).status_code == 401
    good = {"Authorization": "Bearer s3cret"}
    r = httpx.post(sim.url + "/v1/chat/completions", json=chat_body(4), headers=good, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
    lower = {"Authorization": "bearer s3cret"}  # the scheme in any case, as SGLang takes it
    assert httpx.get(sim.url + "/v1/models", headers=lower).status_code == 200
    # And, as SGLang 0.5.23 does, the key comes back in plain text and is in its log: what
    # autotune reads from a server must be masked before it is stored (unit.secrets).
    info = httpx.get(sim.url + "/server_info", headers=good).json()
    assert info["api_key"] == "s3cret" and "--api-key s3cret" in info["launch_command"]
    assert "api_key='s3cret'" in sim.log
