"""SGLang adapter: readiness, resolved settings, capacity, acceptance and failures.

Supported: SGLang 0.5.6 … 0.5.23 (`sglang_facts.OLDEST` / `NEWEST`). Every string matched
here is one SGLang prints, held in `engines/sglang_facts.py` with the file it comes from and
checked against the real wheels by tests/conformance/; the formats that changed between
releases are all accepted (argparse's prog `launch_server.py` → `sglang serve`, `Decode
batch.` → `Decode batch,`, `/get_server_info` → `/server_info`).
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass
from typing import Any

import httpx

from autotune.engines import loading
from autotune.engines import sglang_facts as facts
from autotune.engines._http import get_json, open_client
from autotune.engines._text import argparse_flags, clip, describe_exit, opt_int, prometheus
from autotune.engines.base import Counters, Failure, ServerInfo
from autotune.engines.host import host_failure
from autotune.errors import ServerFailed
from autotune.log import get
from autotune.unit.secrets import MASK, mask_command

__all__ = [
    "READY_LINE",
    "Capacity",
    "SGLangEngine",
    "launch_flags",
    "mamba_cap",
    "parse_capacity",
]

READY_LINE = facts.READY_LINE.text
#: Seconds SGLang may wait for the last level's aborted requests to leave before flushing.
FLUSH_WAIT_S = 10.0
log = get("autotune.engines.sglang")
#: Versions already warned about in this process: one line per server version, not per trial.
_warned: set[str] = set()

# `[2025-06-10 10:01:21 TP0] ` / `[2025-06-10 10:01:21 DP1 TP3] `: SGLang's log prefix.
_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\]\s?")
_CAPACITY_LINE = re.compile(r"max_total_num_tokens=\d+.*max_prefill_tokens=\d+")
_FIELD = re.compile(r"(\w+)=(\d+(?:\.\d+)?)(?:\s*GB)?")
# `Decode batch, ` (0.5.x), `Decode batch [12], ` (SGLANG_LOG_FORWARD_ITERS), `Decode batch. `.
_TIER_SWITCH = re.compile(
    r"^(?:\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^\]]*\]\s?)?.*?"
    + re.escape(facts.TIER_SWITCH.text.split("{}")[0])
    + r"(?P<before>\d+) -> (?P<after>\d+)",
    re.MULTILINE,
)
_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)[^\]]*\]", re.MULTILINE)
_DECODE = re.compile(r"Decode batch(?: \[\d+\])?[.,].*?accept len: (\d+(?:\.\d+)?)")
# argparse's last words: `sglang serve: error: unrecognized arguments: --x 1` (0.5.10 on) or
# `launch_server.py: error: ...` (the script's name, older builds).
_ARGPARSE = re.compile(r"^(?:sglang serve|[\w.-]+): error: (.+)$", re.MULTILINE)
_UNRECOGNIZED = re.compile(r"^unrecognized arguments: (\S+)")
_MAMBA_CAP = re.compile(r"max_running_requests is capped to (\d+) by the mamba state cache")
_EXCEPTION = re.compile(
    r"^((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit))(?:: ?(.*))?$"
)
_FRAME = re.compile(r'^\s+File "([^"]+)"(?:, line \d+)?, in (\S+)')
_REFUSED_TYPES = {"AssertionError", "ValueError", "NotImplementedError"}
# Code that validates the launch flags: a failure raised here is the flags' fault.
# `speculative/spec_info.py` parses the algorithm's name, `adaptive_spec_params.py` the
# adaptive config: both run while the arguments are resolved, before anything loads.
_ARG_CODE = re.compile(
    r"server_args\.py|/arg_groups/|launch_server\.py|/speculative/spec_info\.py"
    r"|/speculative/adaptive_spec_params\.py"
)
# Lines that show the flags were accepted and the model started loading.
_LOADING = re.compile(
    r"server_args=ServerArgs\(|Init torch distributed|Load weight begin|Scheduler hit an exception"
)
# Exceptions that only report that another process failed first.
_CONSEQUENCES = re.compile(
    r"^(EOFError|KeyboardInterrupt|SystemExit|BrokenPipeError|ConnectionResetError)$"
    r"|Initialization failed\. Please see the error messages above"
    r"|scheduler is dead"
)
_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|cudaErrorMemoryAllocation"
    r"|CUBLAS_STATUS_ALLOC_FAILED|Not enough memory|Please try to increase --mem-fraction-static"
    r"|runs out of memory|Not enough host memory"
    # Hybrid (mamba / linear attention) and sliding-window pools (sglang_facts.OOM_MESSAGES).
    r"|state cache is too small to serve|Not enough GPU memory for hybrid"
    r"|leaves no room for the full|leave no GPU memory for the KV cache"
)


@dataclass(frozen=True)
class Capacity:
    """The scheduler's startup line: what the memory budget allowed."""

    max_total_num_tokens: int
    max_running_requests: int | None
    max_prefill_tokens: int | None = None
    chunked_prefill_size: int | None = None
    context_len: int | None = None
    available_mem_gb: float | None = None
    """available_gpu_mem (or available_cpu_mem on CPU); absent in old builds."""


def parse_capacity(log_text: str) -> Capacity | None:
    """The last scheduler capacity line in `log_text`, or None if there is none.

    Current builds print
    `max_total_num_tokens=455357, chunked_prefill_size=8192, max_prefill_tokens=16384,
    max_running_requests=26, context_len=262144, available_gpu_mem=7.41 GB`;
    older ones omit fields (chunked_prefill_size, max_running_requests, the
    available memory), all of which are optional here.
    """
    found: Capacity | None = None
    for line in log_text.splitlines():
        if not _CAPACITY_LINE.search(line):
            continue
        fields = {m.group(1): m.group(2) for m in _FIELD.finditer(line)}
        mem = fields.get("available_gpu_mem", fields.get("available_cpu_mem"))
        found = Capacity(
            max_total_num_tokens=int(fields["max_total_num_tokens"]),
            max_running_requests=opt_int(fields.get("max_running_requests")),
            max_prefill_tokens=opt_int(fields.get("max_prefill_tokens")),
            chunked_prefill_size=opt_int(fields.get("chunked_prefill_size")),
            context_len=opt_int(fields.get("context_len")),
            available_mem_gb=None if mem is None else float(mem),
        )
    return found


class SGLangEngine:
    """The `Engine` for SGLang (`python -m sglang.launch_server`)."""

    name = "sglang"
    #: The flag that turns speculation on: a unit without it (and a space that does not
    #: set it) tunes knobs the server ignores.
    algorithm_flag = "--speculative-algorithm"
    default_port = 30000
    default_host = "127.0.0.1"  # ServerArgs.host
    launch_hint = "SGLang (python -m sglang.launch_server, sglang serve)"
    #: A speculative config that leaves too few running requests is no win for a server
    #: under load; 16 is where the seed's operator drew the line.
    init_constraints = (("min_running_requests", 16),)
    #: A batch above --cuda-graph-max-bs runs without CUDA graphs: a level beyond it measures
    #: a server the operator does not run.
    concurrency_flags = ("--max-running-requests", "--cuda-graph-max-bs")

    def __init__(self, *, timeout: float = 10.0) -> None:
        self.timeout = timeout

    def launched_by(self, argv: list[str]) -> bool:
        words = " ".join(argv)
        if "sglang.launch_server" in words or re.search(r"(^|[/\s])sglang\s+serve\b", words):
            return True
        return _simulated(argv)

    def default_space(self, flags: dict[str, str | None]) -> tuple[str, str]:
        algorithm = (flags.get("--speculative-algorithm") or "").upper()
        if algorithm == "NGRAM":
            return "sglang-ngram.yaml", "NGRAM: draft tokens and the trie's breadth and depth"
        if "--speculative-adaptive" in flags:
            # The adaptive controller falls back to static steps unless topk is 1.
            return "sglang-adaptive.yaml", "adaptive speculation runs chains only (topk 1)"
        # NEXTN runs as EAGLE (0.5.6 srt/server_args.py, 0.5.23 srt/arg_groups/
        # speculative_hook.py), so a topk-1 unit may gain from trees too; its own chain is
        # trial 0 of the same space.
        why = f"{algorithm or 'no algorithm set'}: steps, topk and draft tokens, trees and chains"
        return "sglang-eagle.yaml", why

    def runs(self, asked: dict[str, Any]) -> dict[str, Any]:
        out = dict(asked)
        # server_args: with topk 1 the draft is a chain, num_draft_tokens := steps + 1.
        steps = out.get("speculative_num_steps")
        chain = out.get("speculative_eagle_topk") == 1 and isinstance(steps, int)
        if chain and "speculative_num_draft_tokens" in out:
            out["speculative_num_draft_tokens"] = steps + 1
        return out

    def time_scale(self, argv: list[str]) -> float:
        if not _simulated(argv):
            return 1.0
        return loading.positive(loading.flag_value(argv, "--sim-speedup")) or 1.0

    def load_seconds(self, argv: list[str]) -> float | None:
        if _simulated(argv):
            load = loading.positive(loading.flag_value(argv, "--sim-load-time"))
            return (1.5 if load is None else load) / self.time_scale(argv) + facts.SIM_START_S
        path = loading.flag_value(argv, "--model-path", "--model")
        size = loading.model_bytes(path) or loading.bytes_from_name(path)
        return None if size is None else size / facts.LOAD_BYTES_PER_S

    def ready_paths(self) -> tuple[str, ...]:
        # /ready (0.5.20 on) answers 200 once warmup is done, without work; /health does
        # too but generates a token on every poll. /v1/models and /model_info answer 200
        # before warmup ends, so they cannot be used.
        return ("/ready", "/health")

    def ready_in_log(self, log_text: str) -> bool:
        return READY_LINE in log_text

    async def server_info(
        self, base_url: str, params: list[str], api_key: str | None
    ) -> ServerInfo:
        """Resolved settings from `GET /server_info` (`/get_server_info` for a build without).

        `resolved` holds each requested name the server reports (SGLang's server
        args use the study names, e.g. `speculative_num_steps`); a name it does
        not report is left out. `launch_flags` are the flags on its own record of
        its command line (`launch_command`, 0.5.20 on, secrets redacted).
        `max_running_requests` is the scheduler's effective cap when the build
        reports it (`internal_states[*].effective_max_running_requests_per_dp`,
        summed over DP ranks), otherwise
        the configured server arg, which older builds report even when the
        memory budget allowed fewer: there, `capacity_from_log` is the truth.

        Raises ServerFailed("not_ready", ...) if the server does not answer
        usable JSON, ConfigError if it refuses the API key.
        """
        async with open_client(base_url, api_key, self.timeout) as client:
            # /get_server_info logs a deprecation WARNING on every call in every supported build.
            data = await get_json(client, "/server_info", "/get_server_info")
            if not isinstance(data, dict):
                raise ServerFailed("not_ready", "GET /server_info did not answer a JSON object")
            context_len = opt_int(data.get("context_len"))
            if context_len is None:
                context_len = await _model_len(client)
            if context_len is None:
                context_len = opt_int(data.get("context_length"))
        if isinstance(data.get("launch_command"), str):
            data["launch_command"] = mask_command(data["launch_command"])
        for secret in ("api_key", "admin_api_key"):
            if data.get(secret):
                data[secret] = MASK
        version = str(data["version"]) if data.get("version") is not None else None
        _warn_outside_range(version)
        return ServerInfo(
            resolved={name: data[name] for name in params if name in data},
            max_running_requests=_max_running_requests(data),
            max_total_num_tokens=_max_total_num_tokens(data),
            context_len=context_len,
            version=version,
            raw=data,
            launch_flags=launch_flags(data.get("launch_command")),
            # autotune's simulator in a sped-up rehearsal (docs/rehearsal.md); SGLang has no
            # such key.
            time_scale=_positive_float(data.get("sim_speedup")) or 1.0,
        )

    async def counters(self, base_url: str, api_key: str | None) -> Counters | None:
        """From `/metrics` (`--enable-metrics`): `sglang:generation_tokens_total`,
        `sglang:num_requests_total` and `sglang:spec_verify_calls_total` (0.5.13 on), all
        cumulative. Each request's first token comes from its prefill, so a level's accept
        length is (Δgenerated − Δrequests) / Δverify calls. None without metrics (404) or
        on a build without the verify counter: the decode log lines give acceptance then."""
        try:
            async with open_client(base_url, api_key, self.timeout) as client:
                response = await client.get("/metrics")
        except httpx.HTTPError:
            return None
        if response.status_code != 200:
            return None
        values = prometheus(response.text, "sglang:")
        generated = values.get("sglang:generation_tokens_total")
        if generated is None:
            return None
        verify = values.get("sglang:spec_verify_calls_total")
        requests = values.get("sglang:num_requests_total")
        if verify is None or requests is None:
            return Counters(output_tokens=generated)
        return Counters(
            output_tokens=generated, accepted_tokens=generated - requests - verify, drafts=verify
        )

    async def flush_cache(self, base_url: str, api_key: str | None) -> str:
        """POST /flush_cache (every version we support): the radix cache, with NGRAM's
        store of earlier outputs. SGLang refuses (400) while requests run or wait; the
        `timeout` query lets it wait for the last level's stragglers first."""
        path = f"{facts.FLUSH_CACHE}?timeout={FLUSH_WAIT_S:g}"
        try:
            async with open_client(base_url, api_key, self.timeout + FLUSH_WAIT_S) as client:
                response = await client.post(path)
        except httpx.HTTPError as exc:
            return f"not flushed: POST {facts.FLUSH_CACHE}: {type(exc).__name__}"
        if response.status_code == 200:
            return f"flushed: POST {facts.FLUSH_CACHE}"
        text = " ".join(response.text.split())[:160]
        return f"not flushed: POST {facts.FLUSH_CACHE} answered {response.status_code} {text}"

    def request_failure(self, log_text: str) -> Failure | None:
        return None

    def help_args(self) -> list[str] | None:
        # `launch_server --help` imports torch and the model registry first: tens of seconds
        # on a GPU host, a minute on a laptop, once per `start` and `validate`. It saves a
        # model load for a flag this build lacks, and says at once when the program cannot
        # run at all (no sglang, no torch).
        return ["--help"]

    def flag_problems(self, help_text: str, flags: list[str]) -> dict[str, str]:
        listed = argparse_flags(help_text)
        return {
            flag: "this SGLang does not have it (its --help does not list it)"
            for flag in flags
            if flag not in listed
        }

    def launch_flags_from_log(self, log_text: str) -> dict[str, str | bool] | None:
        return None  # its record is on /server_info (launch_command), not in the log

    def capacity_from_log(self, log_text: str) -> tuple[int | None, int | None]:
        """(max_total_num_tokens, max_running_requests) of the last scheduler capacity line;
        for a hybrid model whose state cache capped the requests (0.5.17 on), that cap."""
        capacity = parse_capacity(log_text)
        cap = mamba_cap(log_text)
        if capacity is None:
            return None, cap
        running = capacity.max_running_requests
        if cap is not None and (running is None or cap < running):
            running = cap
        return capacity.max_total_num_tokens, running

    def accept_length_from_log(self, log_text: str) -> float | None:
        """Mean `accept len` over the decode lines in `log_text` (each covers as many steps).

        Values below 1 are skipped: acceptance length counts the bonus token,
        so anything lower means the interval had no verify step to measure.
        """
        values = [float(v) for v in _DECODE.findall(log_text)]
        values = [v for v in values if v >= 1.0]
        return sum(values) / len(values) if values else None

    def tier_switches(self, log_text: str) -> list[tuple[float | None, int, int]]:
        """`Switch adaptive runtime state: steps X -> Y` lines (0.5.16 on), timed by their
        `[YYYY-mm-dd HH:MM:SS …]` prefix (whole seconds) from the first stamped line."""
        first = _STAMP.search(log_text)
        origin = _stamp_seconds(first.group(1)) if first else None
        out: list[tuple[float | None, int, int]] = []
        for m in _TIER_SWITCH.finditer(log_text):
            at = _stamp_seconds(m.group("stamp")) if m.group("stamp") else None
            rel = None if at is None or origin is None else at - origin
            out.append((rel, int(m.group("before")), int(m.group("after"))))
        return out

    def classify_failure(self, log_text: str, exit_code: int | None) -> Failure:
        """Name why the server did not serve, from its log and exit code.

        Evidence in the log wins over liveness (SGLang's HTTP process can
        outlive a dead scheduler), in this order: the host's failures (a module
        missing, no GPU, the model path, the port: engines/host.py), refused flags (argparse
        errors; AssertionError / ValueError / NotImplementedError raised by the
        argument checks), out of memory, then any other exception
        (crash_on_start, or crash_during_benchmark once the log said ready). With
        no evidence: an exit is crash_on_start / crash_during_benchmark, a live
        process is not_ready.
        """
        lines = [_PREFIX.sub("", line.rstrip()) for line in log_text.splitlines()]
        text = "\n".join(lines)
        ready = self.ready_in_log(log_text)
        host = host_failure(lines, exit_code)
        if host is not None:
            return host  # no config runs on this host as it is: engines/host.py

        usage = _ARGPARSE.search(text)
        if usage:
            unknown = _UNRECOGNIZED.match(usage.group(1))
            if unknown:
                # A flag this build does not have: every trial would fail the same way.
                flag = unknown.group(1).split("=", 1)[0]
                return Failure(
                    "unsupported_flag", clip(f"this SGLang does not accept {flag}"), flag=flag
                )
            return Failure("refused", clip(usage.group(1)))
        exceptions = _exceptions(lines)
        first_loading = next((i for i, line in enumerate(lines) if _LOADING.search(line)), None)
        for exc in exceptions:
            if _is_refusal(exc, first_loading):
                return Failure("refused", exc.reason)
        oom = _oom_reason(lines, exceptions)
        if oom is not None:
            return Failure("out_of_memory", oom)
        crashed = "crash_during_benchmark" if ready else "crash_on_start"
        roots = [
            e
            for e in exceptions
            if not _CONSEQUENCES.search(e.type) and not _CONSEQUENCES.search(e.message)
        ]
        if roots:
            return Failure(crashed, roots[0].reason)
        last = _last_line(lines)
        if exit_code is not None:
            when = "after it was ready" if ready else "before it was ready"
            reason = f"{describe_exit(exit_code)} {when}"
            return Failure(crashed, clip(f"{reason}; last log line: {last}" if last else reason))
        reason = "alive but never ready"
        return Failure("not_ready", clip(f"{reason}; last log line: {last}" if last else reason))


def mamba_cap(log_text: str) -> int | None:
    """The running-request cap a hybrid model's state cache set (the last such warning)."""
    found = _MAMBA_CAP.findall(log_text)
    return int(found[-1]) if found else None


# ---------------------------------------------------------------------- HTTP


def _simulated(argv: list[str]) -> bool:
    """The simulated SGLang server (rehearsal mode)."""
    words = " ".join(argv)
    return "autotune.sim" in words or bool(re.search(r"(^|[/\s])autotune\s+sim\b", words))


def launch_flags(command: Any) -> dict[str, str | bool] | None:
    """Every `--flag` of `launch_command` (the argv joined by spaces, 0.5.20 on) with its
    value, True for a bare switch; None when the server does not report its command line."""
    if not isinstance(command, str):
        return None
    words = command.split()
    out: dict[str, str | bool] = {}
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        flag, eq, inline = word.partition("=")
        if eq:
            out[flag] = inline
        else:
            nxt = words[i + 1] if i + 1 < len(words) else None
            out[flag] = True if nxt is None or nxt.startswith("--") else nxt
    return out


def _warn_outside_range(version: str | None) -> None:
    if version is None or version in _warned:
        return
    _warned.add(version)
    inside = facts.in_range(version)
    if inside is False:
        log.warning(
            f"SGLang {version} is outside the versions autotune is checked against "
            f"({facts.OLDEST} … {facts.NEWEST}): its failures may be labelled wrongly; "
            "see docs/sglang.md"
        )
    elif inside is None:
        log.warning(f"SGLang reports version {version!r}, which autotune cannot compare")


async def _model_len(client: httpx.AsyncClient) -> int | None:
    """Context length from `/v1/models` (data[0].max_model_len); None if unavailable."""
    try:
        response = await client.get("/v1/models")
        models = response.json().get("data") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    if isinstance(models, list) and models and isinstance(models[0], dict):
        return opt_int(models[0].get("max_model_len"))
    return None


def _max_running_requests(data: dict[str, Any]) -> int | None:
    states = data.get("internal_states")
    if isinstance(states, list) and states:
        per_dp = [
            s.get("effective_max_running_requests_per_dp") for s in states if isinstance(s, dict)
        ]
        if per_dp and all(isinstance(v, int) and not isinstance(v, bool) for v in per_dp):
            return sum(per_dp)
    return opt_int(data.get("max_running_requests"))


def _max_total_num_tokens(data: dict[str, Any]) -> int | None:
    value = opt_int(data.get("max_total_num_tokens"))
    if value is not None:
        return value
    states = data.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        usage = states[0].get("memory_usage")
        if isinstance(usage, dict):
            return opt_int(usage.get("token_capacity"))
    return None


# ---------------------------------------------------------------------- log reading


@dataclass(frozen=True)
class _Exception:
    type: str
    message: str
    line: int  # index of the exception line
    frames: tuple[tuple[str, str, str], ...]  # (file, function, code) innermost last

    @property
    def short_type(self) -> str:
        return self.type.rsplit(".", 1)[-1]

    @property
    def reason(self) -> str:
        if self.message:
            return clip(f"{self.type}: {self.message}")
        if self.frames:
            # A bare `assert` says nothing; its code and place do.
            file, function, code = self.frames[-1]
            where = f"{file.rsplit('/', 1)[-1]}, in {function}"
            return clip(f"{self.type}: {code} ({where})" if code else f"{self.type} ({where})")
        return self.type


def _exceptions(lines: list[str]) -> list[_Exception]:
    """Every exception line, with the traceback frames printed just before it."""
    found: list[_Exception] = []
    frames: list[tuple[str, str, str]] = []
    code: list[str] = []
    in_traceback = False
    for index, line in enumerate(lines):
        if "Traceback (most recent call last):" in line:
            frames, code, in_traceback = [], [], True
            continue
        frame = _FRAME.match(line)
        if in_traceback and frame:
            _close_frame(frames, code)
            frames.append((frame.group(1), frame.group(2), ""))
            code = []
            continue
        match = _EXCEPTION.match(line)
        if match:
            _close_frame(frames, code)
            found.append(
                _Exception(match.group(1), (match.group(2) or "").strip(), index, tuple(frames))
            )
            frames, code, in_traceback = [], [], False
            continue
        if (
            in_traceback
            and line.startswith(" ")
            and line.strip()
            and set(line.strip()) - set("^~ ")
        ):
            code.append(line.strip())
    return found


def _close_frame(frames: list[tuple[str, str, str]], code: list[str]) -> None:
    if frames and code:
        file, function, _ = frames[-1]
        frames[-1] = (
            file,
            function,
            re.sub(r"\s+", " ", " ".join(code)).replace("( ", "(").replace(" )", ")"),
        )


def _is_refusal(exc: _Exception, first_loading: int | None) -> bool:
    if exc.short_type not in _REFUSED_TYPES:
        return False
    if exc.frames:
        # Raised by the argument checks themselves, not by something they called
        # (a model config that fails to load inside __post_init__ is no refusal).
        return bool(_ARG_CODE.search(exc.frames[-1][0]))
    # No traceback printed: the flags were refused if loading had not started.
    return first_loading is None or exc.line < first_loading


def _oom_reason(lines: list[str], exceptions: list[_Exception]) -> str | None:
    for exc in exceptions:
        if _OOM.search(f"{exc.type}: {exc.message}"):
            return _first_sentences(exc.reason)
    for line in lines:
        if _OOM.search(line):
            return _first_sentences(line.strip())
    return None


def _first_sentences(text: str) -> str:
    """`CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has ...` -> first two sentences."""
    parts = re.split(r"(?<=\.) (?=[A-Z])", text)
    return clip(" ".join(parts[:2]))


def _last_line(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.strip():
            return line.strip()
    return ""


def _positive_float(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def _stamp_seconds(stamp: str) -> float | None:
    """A log stamp as seconds (a naive time: only differences between stamps are used)."""
    try:
        return calendar.timegm(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))
    except ValueError:
        return None
