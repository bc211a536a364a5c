"""The three streaming APIs: request bodies, and how each stream chunk is read.

- `chat`: OpenAI `/v1/chat/completions`, text in `choices[0].delta.content`
  (and `reasoning_content` of reasoning parsers), count in the final `usage`.
- `completions`: OpenAI `/v1/completions`, text in `choices[0].text`.
- `generate`: SGLang native `/generate`; every chunk states the running
  `meta_info.completion_tokens`, so per-chunk token counts are exact, and
  `meta_info.spec_verify_ct` gives this request's own acceptance length.

llama.cpp adds `timings` to the last chunk of `chat` and `completions`
streams: `draft_n` / `draft_n_accepted` are the request's own drafted and
accepted tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from autotune.bench.record import RequestRecord
from autotune.engines.sglang_facts import DRAFTS_HISTOGRAM_KEY

ENDPOINTS: dict[str, str] = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "generate": "/generate",
}

Prompt = str | tuple[Mapping[str, str], ...]


class StreamError(Exception):
    """The stream broke the protocol or the server reported an error inside it."""


def prompt_text(prompt: Prompt) -> str:
    """A chat prompt flattened for the text endpoints (no chat template is applied)."""
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(m.get("content", "") for m in prompt)


def request_body(
    endpoint: str,
    prompt: Prompt,
    *,
    model: str | None,
    max_tokens: int,
    temperature: float,
    ignore_eos: bool,
) -> dict[str, Any]:
    """JSON body of one streaming request."""
    if endpoint == "generate":
        return {
            "text": prompt_text(prompt),
            "sampling_params": {
                "max_new_tokens": max_tokens,
                "temperature": temperature,
                "ignore_eos": ignore_eos,
            },
            "stream": True,
        }
    body: dict[str, Any] = {}
    if model is not None:
        body["model"] = model
    if endpoint == "chat":
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        body["messages"] = list(messages)
    else:
        body["prompt"] = prompt_text(prompt)
    body["max_tokens"] = max_tokens
    body["temperature"] = temperature
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        # Not OpenAI's API, but SGLang and vLLM accept it; sent only when asked
        # so that strict servers still take the default workload.
        body["ignore_eos"] = True
    return body


def _load(payload: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(payload)
    except ValueError as exc:
        raise StreamError(f"malformed chunk (not JSON: {exc.msg}): {_clip(payload)}") from None
    if not isinstance(obj, dict):
        raise StreamError(f"malformed chunk (not a JSON object): {_clip(payload)}")
    err = obj.get("error")
    if err is not None or obj.get("object") == "error":
        raise StreamError(f"server error in stream: {_error_message(obj)}")
    return obj


def _error_message(obj: Mapping[str, Any]) -> str:
    err = obj.get("error", obj)
    if isinstance(err, Mapping):
        msg = err.get("message") or err.get("detail") or json.dumps(err)
        return str(msg)[:300]
    return str(err)[:300]


def _clip(payload: bytes, n: int = 120) -> str:
    text = payload.decode("utf-8", "replace")
    return text if len(text) <= n else text[:n] + "..."


def _usage(rec: RequestRecord, usage: Any) -> None:
    if not isinstance(usage, Mapping):
        raise StreamError(f"malformed chunk (usage is not an object): {usage!r:.100}")
    ct = usage.get("completion_tokens")
    if not isinstance(ct, int) or ct < 0:
        raise StreamError(f"malformed chunk (usage.completion_tokens = {ct!r:.40})")
    rec.completion_tokens = ct
    pt = usage.get("prompt_tokens")
    if isinstance(pt, int):
        rec.prompt_tokens = pt


def _timings(rec: RequestRecord, obj: Mapping[str, Any]) -> None:
    """llama.cpp's `timings` on a stream's last chunk: this request's drafted and accepted
    tokens (absent when it drafted nothing, which then counts as zero of each)."""
    timings = obj.get("timings")
    if not isinstance(timings, Mapping):
        return
    drafted, accepted = timings.get("draft_n", 0), timings.get("draft_n_accepted", 0)
    if isinstance(drafted, int) and isinstance(accepted, int):
        rec.draft_tokens, rec.draft_accepted = drafted, accepted


def _choice(obj: Mapping[str, Any], payload: bytes) -> Mapping[str, Any] | None:
    choices = obj.get("choices")
    if choices is None or choices == []:
        return None
    if not isinstance(choices, list) or not isinstance(choices[0], Mapping):
        raise StreamError(f"malformed chunk (choices): {_clip(payload)}")
    return choices[0]


class ChunkReader(Protocol):
    def __call__(self, rec: RequestRecord, payload: bytes, t: float) -> bool:
        """Read one SSE payload that arrived at `t` into `rec`; True when the stream is done."""


def read_chat(rec: RequestRecord, payload: bytes, t: float) -> bool:
    if payload == b"[DONE]":
        rec.done = True
        return True
    obj = _load(payload)
    choice = _choice(obj, payload)
    if choice is not None:
        delta = choice.get("delta")
        if delta:
            if not isinstance(delta, Mapping):
                raise StreamError(f"malformed chunk (delta): {_clip(payload)}")
            text = delta.get("content") or ""
            reasoning = delta.get("reasoning_content")
            if reasoning:
                text = reasoning + text
            if text:
                if not isinstance(text, str):
                    raise StreamError(f"malformed chunk (content): {_clip(payload)}")
                rec.add_text(t, text)
        fr = choice.get("finish_reason")
        if fr:
            rec.finish_reason = str(fr)
    usage = obj.get("usage")
    if usage:
        _usage(rec, usage)
    _timings(rec, obj)
    return False


def read_completions(rec: RequestRecord, payload: bytes, t: float) -> bool:
    if payload == b"[DONE]":
        rec.done = True
        return True
    obj = _load(payload)
    choice = _choice(obj, payload)
    if choice is not None:
        text = choice.get("text")
        if text:
            if not isinstance(text, str):
                raise StreamError(f"malformed chunk (text): {_clip(payload)}")
            rec.add_text(t, text)
        fr = choice.get("finish_reason")
        if fr:
            rec.finish_reason = str(fr)
    usage = obj.get("usage")
    if usage:
        _usage(rec, usage)
    _timings(rec, obj)
    return False


class GenerateReader:
    """SGLang `/generate` chunks: running token count, text cumulative or incremental.

    SGLang streams the whole text so far unless started with
    `--incremental-streaming-output`; which one is decided on the second chunk.
    """

    __slots__ = ("_cumulative", "_prev_text", "_prev_tokens")

    def __init__(self) -> None:
        self._prev_tokens = 0
        self._prev_text = ""
        self._cumulative: bool | None = None

    def __call__(self, rec: RequestRecord, payload: bytes, t: float) -> bool:
        if payload == b"[DONE]":
            rec.done = True
            return True
        obj = _load(payload)
        meta = obj.get("meta_info")
        if not isinstance(meta, Mapping):
            raise StreamError(f"malformed chunk (no meta_info): {_clip(payload)}")
        tokens = meta.get("completion_tokens")
        if not isinstance(tokens, int):
            raise StreamError(f"malformed chunk (meta_info.completion_tokens): {_clip(payload)}")
        text = obj.get("text") or ""
        if not isinstance(text, str):
            raise StreamError(f"malformed chunk (text): {_clip(payload)}")
        delta_text = self._delta(text)
        new = tokens - self._prev_tokens
        if new < 0:
            raise StreamError(f"completion_tokens went down ({self._prev_tokens} -> {tokens})")
        if new > 0 or delta_text:
            rec.add_tokens(t, new, delta_text)
        self._prev_tokens = tokens
        rec.completion_tokens = tokens
        pt = meta.get("prompt_tokens")
        if isinstance(pt, int):
            rec.prompt_tokens = pt
        vc = meta.get("spec_verify_ct")
        if isinstance(vc, int):
            rec.spec_verify_ct = vc
        hist = meta.get(DRAFTS_HISTOGRAM_KEY)
        if isinstance(hist, list) and all(isinstance(n, int) for n in hist):
            rec.accept_histogram = hist
        fr = meta.get("finish_reason")
        if fr:
            rec.finish_reason = str(fr.get("type", fr)) if isinstance(fr, Mapping) else str(fr)
        return False

    def _delta(self, text: str) -> str:
        prev = self._prev_text
        if self._cumulative is None:
            if not prev:
                self._prev_text = text
                return text
            self._cumulative = text.startswith(prev)
        if not self._cumulative:
            return text
        self._prev_text = text
        # Cumulative text that rewrote its tail (detokenizer fix-up) adds no new text.
        return text[len(prev) :] if text.startswith(prev) else ""


def chunk_reader(endpoint: str) -> ChunkReader:
    """A reader for one request's stream (readers may keep per-stream state)."""
    if endpoint == "chat":
        return read_chat
    if endpoint == "completions":
        return read_completions
    if endpoint == "generate":
        return GenerateReader()
    raise ValueError(f"unknown endpoint {endpoint!r}; expected one of {', '.join(ENDPOINTS)}")


def usage_source(endpoint: str) -> str:
    return "meta_info" if endpoint == "generate" else "usage"


def check_endpoint(endpoint: str) -> None:
    if endpoint not in ENDPOINTS:
        raise ValueError(f"unknown endpoint {endpoint!r}; expected one of {', '.join(ENDPOINTS)}")
