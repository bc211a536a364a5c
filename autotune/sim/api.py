"""Generation requests in, SGLang-shaped responses and stream chunks out.

Three APIs share one scheduler: OpenAI chat and completions (SSE chunks in
OpenAI's format, usage in a final chunk) and SGLang's native `/generate`
(cumulative text, a running `meta_info`). Under speculation one chunk carries
every token accepted in one verify step, as a real server sends them.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.engines import sglang_facts
from autotune.sim import httpio, lengths
from autotune.sim.scheduler import Req, Scheduler
from autotune.sim.text import TextSource

CHARS_PER_TOKEN = 4
CHAT_TEMPLATE_TOKENS = 6  # role markers around each message
NATIVE_DEFAULT_MAX_NEW = 128  # SGLang's SamplingParams default


class ApiError(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def error_body(message: str, status: int = 400) -> bytes:
    return json.dumps(
        {
            "object": "error",
            "message": message,
            "type": "BadRequestError",
            "param": None,
            "code": status,
        }
    ).encode()


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# -- parsing --------------------------------------------------------------------
def count_text_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def prompt_tokens(prompt: str | Sequence[Mapping[str, Any]], endpoint: str = "chat") -> int:
    """What this server counts for a prompt sent to `endpoint` (chat | completions | generate).

    Chat messages are joined into one text for the other endpoints, as the benchmark does.
    """
    if endpoint == "chat":
        messages = [{"content": prompt}] if isinstance(prompt, str) else prompt
        return 3 + sum(
            CHAT_TEMPLATE_TOKENS + count_text_tokens(_message_text(m.get("content")))
            for m in messages
        )
    if isinstance(prompt, str):
        return count_text_tokens(prompt)
    return count_text_tokens("\n\n".join(_message_text(m.get("content")) for m in prompt))


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            p.get("text", "") for p in content if isinstance(p, Mapping) and "text" in p
        )
    return ""


def _int_field(body: Mapping[str, Any], *names: str) -> int | None:
    for name in names:
        v = body.get(name)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise ApiError(f"{name} must be an integer, got {v!r}")
        if v < 1:
            raise ApiError(f"{name} must be at least 1, got {v}")
        return v
    return None


def _temperature(v: Any) -> float:
    if v is None:
        return 1.0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        raise ApiError(f"temperature must be a non-negative number, got {v!r}")
    return float(v)


class GenParams:
    """What the scheduler needs to know about one request, whatever API it came through."""

    __slots__ = (
        "greedy",
        "ignore_eos",
        "include_usage",
        "max_new",
        "prompt_key",
        "prompt_tokens",
        "stream",
    )

    def __init__(
        self,
        prompt_tokens: int,
        max_new: int | None,
        temperature: float,
        ignore_eos: bool,
        stream: bool,
        include_usage: bool = False,
    ) -> None:
        self.prompt_tokens = prompt_tokens
        self.max_new = max_new
        self.greedy = temperature == 0.0
        self.ignore_eos = ignore_eos
        self.stream = stream
        self.include_usage = include_usage
        self.prompt_key = 0
        """A fingerprint of the prompt: NGRAM's corpus knows the prompts it has seen."""


def parse_chat(body: Mapping[str, Any]) -> GenParams:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("messages must be a non-empty list")
    if not all(isinstance(m, Mapping) for m in messages):
        raise ApiError("each message must be an object with role and content")
    params = _openai_params(body, prompt_tokens(messages))
    params.prompt_key = _fingerprint([_message_text(m.get("content")) for m in messages])
    return params


def parse_completion(body: Mapping[str, Any]) -> GenParams:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        tokens = count_text_tokens(prompt)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        tokens = len(prompt)
    else:
        raise ApiError("prompt must be a string or a list of token ids")
    params = _openai_params(body, tokens)
    params.prompt_key = _fingerprint(prompt)
    if params.max_new is None:
        params.max_new = 16  # OpenAI's default for completions
    return params


def _openai_params(body: Mapping[str, Any], prompt_tokens: int) -> GenParams:
    n = body.get("n", 1)
    if n not in (None, 1):
        raise ApiError("the simulator supports n=1 only")
    opts = body.get("stream_options") or {}
    return GenParams(
        prompt_tokens,
        _int_field(body, "max_completion_tokens", "max_tokens"),
        _temperature(body.get("temperature")),
        bool(body.get("ignore_eos", False)),
        bool(body.get("stream", False)),
        bool(isinstance(opts, Mapping) and opts.get("include_usage")),
    )


def parse_generate(body: Mapping[str, Any]) -> GenParams:
    text, ids = body.get("text"), body.get("input_ids")
    if isinstance(text, str):
        tokens = count_text_tokens(text)
    elif isinstance(ids, list) and ids and all(isinstance(t, int) for t in ids):
        tokens = len(ids)
    else:
        raise ApiError("give text (a string) or input_ids (a list of token ids)")
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, Mapping):
        raise ApiError("sampling_params must be an object")
    max_new = _int_field(sp, "max_new_tokens")
    params = GenParams(
        tokens,
        NATIVE_DEFAULT_MAX_NEW if max_new is None else max_new,
        _temperature(sp.get("temperature")),
        bool(sp.get("ignore_eos", False)),
        bool(body.get("stream", False)),
    )
    params.prompt_key = _fingerprint(text if isinstance(text, str) else ids)
    return params


def _fingerprint(prompt: Any) -> int:
    return zlib.crc32(json.dumps(prompt, sort_keys=True).encode())


def make_request(scheduler: Scheduler, params: GenParams, sink: Any, *, client: bool = True) -> Req:
    """Decide the reply's length and acceptance regime, and wrap it for the scheduler."""
    context = scheduler.resolved.context_len
    if params.prompt_tokens >= context:
        raise ApiError(
            f"The input ({params.prompt_tokens} tokens) is longer than the model's context "
            f"length ({context} tokens)."
        )
    limit = context - params.prompt_tokens
    max_new = min(params.max_new or limit, limit)
    if params.ignore_eos:
        target, by_eos = max_new, False
    else:
        target = lengths.sample_output_length(scheduler.rng.random(), "natural", max_new)
        by_eos = target < max_new
    rid = scheduler.new_id()
    return Req(
        rid,
        params.prompt_tokens,
        target,
        greedy=params.greedy,
        stop_by_eos=by_eos,
        cdf=scheduler.accept_cdf(params.greedy, seen=scheduler.remember(params.prompt_key)),
        text=TextSource(
            params.greedy or scheduler.rng.random() < scheduler.loop_share, zlib.crc32(rid.encode())
        ),
        sink=sink,
        client=client,
    )


# -- sinks ----------------------------------------------------------------------
class _Done:
    """A future-backed completion signal shared by the sinks."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def _resolve(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class CollectSink(_Done):
    """A non-streaming request: keep the text, answer at the end."""

    __slots__ = ("parts",)

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def tokens(self, req: Req, text: str, n: int) -> None:
        self.parts.append(text)

    def finish(self, req: Req) -> None:
        self._resolve()


class _StreamSink(_Done):
    __slots__ = ("scheduler", "writer")

    def __init__(self, scheduler: Scheduler, writer: asyncio.StreamWriter) -> None:
        super().__init__()
        self.scheduler = scheduler
        self.writer = writer

    def _send(self, req: Req, data: bytes) -> None:
        if self.writer.transport.is_closing():
            self.scheduler.abort(req)
            self._resolve()
            return
        self.writer.write(data)

    def _finishing(self, req: Req) -> bool:
        return req.emitted >= req.target

    def _finish_reason(self, req: Req) -> bytes:
        return b'"stop"' if req.stop_by_eos else b'"length"'


class OpenAIStreamSink(_StreamSink):
    """`/v1/chat/completions` or `/v1/completions` with `stream: true`."""

    __slots__ = ("_head", "_matched", "_started", "_tail", "chat", "include_usage", "model")

    def __init__(
        self,
        scheduler: Scheduler,
        writer: asyncio.StreamWriter,
        *,
        chat: bool,
        model_name: str,
        include_usage: bool,
        eos_token_id: int,
        rid: str,
    ) -> None:
        super().__init__(scheduler, writer)
        self.chat = chat
        self.model = model_name
        self.include_usage = include_usage
        self._started = False
        kind = b"chat.completion.chunk" if chat else b"text_completion"
        self._head = b'data: {"id":"%s","object":"%s","created":%d,"model":%s,"choices":[' % (
            rid.encode(),
            kind,
            int(time.time()),
            _dumps(model_name),
        )
        self._matched = b"%d" % eos_token_id
        self._tail = b'}],"usage":null}\n\n'

    def _choice(self, text: bytes, finish: bytes, matched: bytes) -> bytes:
        end = b',"logprobs":null,"finish_reason":%s,"matched_stop":%s' % (finish, matched)
        if self.chat:
            return (
                b'{"index":0,"delta":{"role":null,"content":%s,"reasoning_content":null,'
                b'"tool_calls":null}%s' % (text, end)
            )
        return b'{"index":0,"text":%s%s' % (text, end)

    def tokens(self, req: Req, text: str, n: int) -> None:
        out = b""
        if not self._started and self.chat:
            # SGLang opens a chat stream with the role and empty content.
            role = (
                b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
                b'"finish_reason":null,"matched_stop":null'
            )
            out += httpio.chunk(self._head + role + self._tail)
        self._started = True
        if self._finishing(req):
            finish = self._finish_reason(req)
            matched = self._matched if req.stop_by_eos else b"null"
        else:
            finish = matched = b"null"
        payload = self._head + self._choice(_dumps(text), finish, matched) + self._tail
        self._send(req, out + httpio.chunk(payload))

    def finish(self, req: Req) -> None:
        out = b""
        if self.include_usage:
            usage = {
                "prompt_tokens": req.prompt_tokens,
                "total_tokens": req.prompt_tokens + req.emitted,
                "completion_tokens": req.emitted,
                "prompt_tokens_details": None,
            }
            out += httpio.chunk(self._head + b'],"usage":%s}\n\n' % _dumps(usage))
        out += httpio.chunk(b"data: [DONE]\n\n") + httpio.LAST_CHUNK
        self._send(req, out)
        self._resolve()


class GenerateStreamSink(_StreamSink):
    """Native `/generate` with `stream: true`: cumulative text, running meta_info."""

    __slots__ = ("eos_token_id", "parts", "spec")

    def __init__(
        self, scheduler: Scheduler, writer: asyncio.StreamWriter, *, eos_token_id: int
    ) -> None:
        super().__init__(scheduler, writer)
        self.parts: list[str] = []
        self.eos_token_id = eos_token_id
        self.spec = scheduler.spec.on

    def tokens(self, req: Req, text: str, n: int) -> None:
        self.parts.append(text)
        final = self._finishing(req)
        obj = {
            "text": "".join(self.parts),
            "meta_info": generate_meta(req, self.spec, self.eos_token_id, final),
        }
        self._send(req, httpio.chunk(b"data: " + _dumps(obj) + b"\n\n"))

    def finish(self, req: Req) -> None:
        self._send(req, httpio.chunk(b"data: [DONE]\n\n") + httpio.LAST_CHUNK)
        self._resolve()


def generate_meta(req: Req, spec: bool, eos_token_id: int, final: bool) -> dict[str, Any]:
    finish: dict[str, Any] | None = None
    if final:
        finish = (
            {"type": "stop", "matched": eos_token_id}
            if req.stop_by_eos
            else {"type": "length", "length": req.emitted}
        )
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": finish,
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": req.emitted,
        "cached_tokens": 0,
    }
    if spec:
        meta["spec_verify_ct"] = req.verify_ct
        if req.correct_drafts:
            meta[sglang_facts.DRAFTS_HISTOGRAM_KEY] = list(req.correct_drafts)
    if final:
        meta["e2e_latency"] = round(time.monotonic() - req.created, 6)
    return meta


# -- non-streaming bodies ---------------------------------------------------------
def openai_body(req: Req, text: str, *, chat: bool, model_name: str, eos_token_id: int) -> bytes:
    finish = req.finish_reason
    matched = eos_token_id if req.stop_by_eos else None
    choice: dict[str, Any]
    if chat:
        choice = {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": text,
                "reasoning_content": None,
                "tool_calls": None,
            },
            "logprobs": None,
            "finish_reason": finish,
            "matched_stop": matched,
        }
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish,
            "matched_stop": matched,
        }
    return _dumps(
        {
            "id": req.rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": req.prompt_tokens,
                "total_tokens": req.prompt_tokens + req.emitted,
                "completion_tokens": req.emitted,
                "prompt_tokens_details": None,
            },
        }
    )


def generate_body(req: Req, text: str, *, spec: bool, eos_token_id: int) -> bytes:
    return _dumps({"text": text, "meta_info": generate_meta(req, spec, eos_token_id, True)})
