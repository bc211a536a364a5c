"""SGLang-style launch flags plus the simulator's own `--sim-*` and `--predict` flags.

Hand-rolled rather than argparse: any SGLang flag the simulator does not
model must be accepted (a unit file written for the real server has to start
the simulator unchanged), and argparse cannot tell an unknown boolean flag
from one that takes a value. Rule used here, as for SGLang's own flags: a
token after an unknown flag is its value unless it starts with `--`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from autotune.sim import model
from autotune.sim.profiles import DEFAULT_PROFILE, get_profile


class ArgError(Exception):
    """A flag the simulator cannot run with; printed as one line, exit code 2."""


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str  # "crash-on-start" | "hang-on-start" | "crash-after" | "crash-once-after" | ...
    value: float = 0.0
    path: str | None = None  # crash-once-after: the marker that makes later starts clean

    def __str__(self) -> str:
        if self.kind == "crash-after":
            return f"crash-after:{int(self.value)}"
        if self.kind == "crash-once-after":
            return f"crash-once-after:{int(self.value)}:{self.path}"
        if self.kind == "slow-start":
            return f"slow-start:{self.value:g}"
        return self.kind


@dataclass(frozen=True, slots=True)
class SimOptions:
    load_time: float = 1.5
    noise: float = 0.02
    seed: int | None = None
    profile: str = DEFAULT_PROFILE
    fault: Fault | None = None
    loop_share: float = 0.0
    """Share of sampled replies that fall into a loop (a small model's habit: gemma3-270m
    looped in 10-33 % of natural replies on llama.cpp); greedy replies always loop."""
    speedup: float = 1.0
    """A rehearsal faster than real time: the server runs this many times faster and says so
    in /server_info (`sim_speedup`), so that autotune reports real-server units."""


@dataclass(frozen=True, slots=True)
class PredictOptions:
    concurrency: tuple[int, ...] = (1, 16, 64)
    workload: str = "greedy"
    max_tokens: int = 256
    input_len: int | None = None  # None: the benchmark's built-in prompts (about 72)
    space: str | None = None


@dataclass(frozen=True, slots=True)
class SimArgs:
    launch: model.Launch
    model_path: str | None = None
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: str | None = None
    enable_metrics: bool = False
    sim: SimOptions = field(default_factory=SimOptions)
    predict: PredictOptions | None = None
    ignored: tuple[str, ...] = ()
    help: bool = False
    argv: tuple[str, ...] = ()
    """The launch flags as given: `/server_info`'s launch_command."""


def _int(flag: str, v: str) -> int:
    try:
        return int(v)
    except ValueError:
        raise ArgError(f"argument {flag}: invalid int value: {v!r}") from None


def _float(flag: str, v: str) -> float:
    try:
        x = float(v)
    except ValueError:
        raise ArgError(f"argument {flag}: invalid float value: {v!r}") from None
    if not math.isfinite(x):
        raise ArgError(f"argument {flag}: invalid float value: {v!r}")
    return x


def _algorithm(flag: str, v: str) -> str:
    # No argparse choices since SGLang 0.5.16: an unknown name is a ValueError raised while
    # the arguments are resolved (model.resolve), after the parser accepted it.
    return v.upper()


def _positive(flag: str, v: str) -> int:
    n = _int(flag, v)
    if n < 1:
        raise ArgError(f"argument {flag}: must be a positive integer, got {v!r}")
    return n


def _fraction(flag: str, v: str) -> float:
    x = _float(flag, v)
    if not 0.0 < x < 1.0:
        raise ArgError(f"argument {flag}: must be between 0 and 1, got {v!r}")
    return x


def _match_type(flag: str, v: str) -> str:
    if v.upper() not in ("BFS", "PROB"):
        raise ArgError(f"argument {flag}: invalid choice: {v!r} (choose from 'BFS', 'PROB')")
    return v.upper()


# SGLang flags the simulator models: flag -> (SimArgs/Launch key, converter).
_VALUE_FLAGS: dict[str, tuple[str, Any]] = {
    "--model-path": ("model_path", lambda f, v: v),
    "--model": ("model_path", lambda f, v: v),
    "--served-model-name": ("served_model_name", lambda f, v: v),
    "--host": ("host", lambda f, v: v),
    "--port": ("port", _int),
    "--api-key": ("api_key", lambda f, v: v),
    "--speculative-algorithm": ("speculative_algorithm", _algorithm),
    "--speculative-num-steps": ("speculative_num_steps", _int),
    "--speculative-eagle-topk": ("speculative_eagle_topk", _int),
    "--speculative-num-draft-tokens": ("speculative_num_draft_tokens", _int),
    "--max-running-requests": ("max_running_requests", _positive),
    "--mem-fraction-static": ("mem_fraction_static", _fraction),
    # 0.5.23 split --cuda-graph-max-bs into -decode and -prefill; decode sizes the workspace.
    "--cuda-graph-max-bs-decode": ("cuda_graph_max_bs", _positive),
    "--speculative-adaptive-config": ("speculative_adaptive_config", lambda f, v: v),
    "--speculative-ngram-min-bfs-breadth": ("speculative_ngram_min_bfs_breadth", _int),
    "--speculative-ngram-max-bfs-breadth": ("speculative_ngram_max_bfs_breadth", _int),
    "--speculative-ngram-match-type": ("speculative_ngram_match_type", _match_type),
    "--speculative-ngram-max-trie-depth": ("speculative_ngram_max_trie_depth", _int),
    "--speculative-ngram-capacity": ("speculative_ngram_capacity", _int),
}
_BOOL_FLAGS = {
    "--enable-metrics": "enable_metrics",
    "--speculative-adaptive": "speculative_adaptive",
    "--disable-overlap-schedule": "disable_overlap_schedule",
}
_LAUNCH_KEYS = set(model.Launch.__slots__)


def _sim_profile(flag: str, v: str) -> str:
    try:
        return get_profile(v).name
    except KeyError as exc:
        raise ArgError(f"argument {flag}: {exc.args[0]}") from None


def _sim_load_time(flag: str, v: str) -> float:
    x = _float(flag, v)
    if x < 0:
        raise ArgError(f"argument {flag}: must be >= 0 seconds, got {v!r}")
    return x


def _sim_speedup(flag: str, v: str) -> float:
    x = _float(flag, v)
    if not 1.0 <= x <= 10.0:
        raise ArgError(f"argument {flag}: must be between 1 and 10, got {v!r}")
    return x


def _sim_noise(flag: str, v: str) -> float:
    x = _float(flag, v)
    if not 0.0 <= x <= 0.3:
        raise ArgError(f"argument {flag}: must be a fraction between 0 and 0.3, got {v!r}")
    return x


def _share(flag: str, v: str) -> float:
    x = _float(flag, v)
    if not 0.0 <= x <= 1.0:
        raise ArgError(f"argument {flag}: must be a share between 0 and 1, got {v!r}")
    return x


def parse_fault(v: str) -> Fault:
    kind, _, arg = v.partition(":")
    if kind in ("crash-on-start", "hang-on-start") and not arg:
        return Fault(kind)
    if kind == "crash-after" and arg:
        try:
            n = int(arg)
        except ValueError:
            n = -1
        if n >= 0:
            return Fault(kind, float(n))
    if kind == "crash-once-after" and ":" in arg:
        count, _, path = arg.partition(":")
        if count.isdigit() and path:
            if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
                raise ArgError(f"argument --sim-fault: no folder for marker {path!r}")
            return Fault(kind, float(count), path)
    if kind == "slow-start" and arg:
        try:
            s = float(arg)
        except ValueError:
            s = -1.0
        if s >= 0 and math.isfinite(s):
            return Fault(kind, s)
    raise ArgError(
        f"argument --sim-fault: invalid value {v!r} (expected crash-on-start, "
        "hang-on-start, crash-after:N, crash-once-after:N:MARKER or slow-start:SECONDS)"
    )


_SIM_FLAGS: dict[str, tuple[str, Any]] = {
    "--sim-load-time": ("load_time", _sim_load_time),
    "--sim-noise": ("noise", _sim_noise),
    "--sim-seed": ("seed", _int),
    "--sim-profile": ("profile", _sim_profile),
    "--sim-fault": ("fault", lambda f, v: parse_fault(v)),
    "--sim-speedup": ("speedup", _sim_speedup),
    "--sim-loop-share": ("loop_share", _share),
}


def _levels(flag: str, v: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in v.split(",") if x.strip())
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise ArgError(f"argument {flag}: expected positive integers like 1,16,64, got {v!r}")
    return out


def _workload(flag: str, v: str) -> str:
    if v not in model.WORKLOADS:
        raise ArgError(f"argument {flag}: invalid choice: {v!r} (choose from greedy, natural)")
    return v


_PREDICT_FLAGS: dict[str, tuple[str, Any]] = {
    "--concurrency": ("concurrency", _levels),
    "--workload": ("workload", _workload),
    "--max-tokens": ("max_tokens", _positive),
    "--input-len": ("input_len", _positive),
    "--space": ("space", lambda f, v: v),
}


def parse(argv: list[str]) -> SimArgs:
    """Parse a launch command line; raises ArgError for what the simulator cannot accept.
    (0.5.23 reads no SGLANG_* variable the simulator models: SGLANG_ENABLE_SPEC_V2 is gone.)"""
    top: dict[str, Any] = {}
    launch: dict[str, Any] = {}
    sim: dict[str, Any] = {}
    predict: dict[str, Any] = {}
    ignored: list[str] = []
    predict_mode = False
    want_help = False
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("--"):
            raise ArgError(f"unrecognized arguments: {tok}")
        name, eq, inline = tok.partition("=")
        if name in ("--help", "-h"):
            want_help = True
            continue
        if name == "--predict":
            if eq:
                raise ArgError("argument --predict: takes no value")
            predict_mode = True
            continue
        if name in _BOOL_FLAGS:
            if eq and inline.lower() not in ("true", "1"):
                raise ArgError(f"argument {name}: takes no value")
            key = _BOOL_FLAGS[name]
            (launch if key in _LAUNCH_KEYS else top)[key] = True
            continue
        table = None
        for t in (_VALUE_FLAGS, _SIM_FLAGS, _PREDICT_FLAGS):
            if name in t:
                table = t
        if table is None:
            if name.startswith("--sim-"):
                known = ", ".join(_SIM_FLAGS)
                raise ArgError(f"unknown simulator flag {name} (known: {known})")
            ignored.append(name)
            # An unknown flag's value is the next token unless that is another flag.
            if not eq and i < len(argv) and not argv[i].startswith("--"):
                i += 1
            continue
        if eq:
            value = inline
        elif i < len(argv) and not argv[i].startswith("--"):
            value = argv[i]
            i += 1
        else:
            raise ArgError(f"argument {name}: expected one argument")
        key, conv = table[name]
        converted = conv(name, value)
        if table is _SIM_FLAGS:
            sim[key] = converted
        elif table is _PREDICT_FLAGS:
            predict[key] = converted
        elif key in _LAUNCH_KEYS:
            launch[key] = converted
        else:
            top[key] = converted
    if predict and not predict_mode:
        raise ArgError(f"{'/'.join('--' + k.replace('_', '-') for k in predict)} need --predict")
    return _checked(top, launch, sim, predict if predict_mode else None, ignored, want_help, argv)


def _checked(
    top: dict[str, Any],
    launch: dict[str, Any],
    sim: dict[str, Any],
    predict: dict[str, Any] | None,
    ignored: list[str],
    want_help: bool,
    argv: list[str],
) -> SimArgs:
    """The parsed flags checked as a whole and read where SGLang reads them at launch."""
    port = top.get("port", 30000)
    if not 0 <= port <= 65535:
        raise ArgError(f"argument --port: {port} is not a TCP port")
    path = launch.get("speculative_adaptive_config")
    if path is not None:
        # Read at launch, as SGLang does; a missing file is the server's refusal, not ours.
        try:
            with open(path, encoding="utf-8") as f:
                launch["adaptive_config_text"] = f.read()
        except OSError:
            pass
    return SimArgs(
        launch=model.Launch(**launch),
        sim=SimOptions(**sim),
        predict=PredictOptions(**predict) if predict is not None else None,
        ignored=tuple(ignored),
        help=want_help,
        argv=tuple(argv),
        **top,
    )


USAGE = """\
usage: python -m autotune.sim [SGLang launch flags] [--sim-* flags]
       python -m autotune.sim --predict [SGLang launch flags] [--sim-profile NAME]
              [--concurrency 1,16,64] [--workload greedy|natural]
              [--max-tokens 256] [--input-len 72] [--space FILE]

A simulated SGLang server ("rehearsal mode"). Modelled SGLang flags:
  --model-path --served-model-name --host --port --api-key --enable-metrics
  --speculative-algorithm --speculative-num-steps --speculative-eagle-topk
  --speculative-num-draft-tokens --max-running-requests --mem-fraction-static
  --cuda-graph-max-bs-decode --speculative-adaptive --speculative-adaptive-config
  --speculative-ngram-min-bfs-breadth --speculative-ngram-max-bfs-breadth
  --speculative-ngram-match-type --speculative-ngram-max-trie-depth
  --speculative-ngram-capacity --disable-overlap-schedule
Any other SGLang flag is accepted and ignored (one warning line lists them).

Simulator flags:
  --sim-profile NAME      deployment to simulate (default: %(profile)s; see docs/rehearsal.md)
  --sim-load-time SECONDS model load time before the port opens (default 1.5; 95 is realistic)
  --sim-noise FRACTION    run-to-run speed spread and per-iteration jitter (default 0.02)
  --sim-seed N            make the noise and the sampled outputs reproducible
  --sim-fault SPEC        crash-on-start | hang-on-start | crash-after:N |
                          crash-once-after:N:MARKER | slow-start:SECONDS
  --sim-loop-share SHARE  share of sampled replies that loop, as a small model's do (default 0)
  --sim-speedup K         a rehearsal K times faster than real time (1-10; default 1): the
                          server says so in /server_info, autotune reports real-server units

--predict prints the noise-free steady state instead of serving, one JSON object per
concurrency level (or per configuration of --space FILE).
"""
