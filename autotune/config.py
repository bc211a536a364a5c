"""autotune.yaml -> a frozen, typed Config. Every error names the file, key path and value.

Relative paths in a config file are relative to that file's folder, so a
config can be run from anywhere. A search space given by bare name
(`sglang-eagle.yaml`) is also looked up among the built-in `search_spaces/`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from autotune import resources, yamlfile
from autotune.bench import defaults as bench_defaults
from autotune.engines import engine_names
from autotune.errors import ConfigError
from autotune.space import ENUMERABLE_LIMIT, SearchSpace, load_space, space_from_dict
from autotune.store.storage import redact
from autotune.store.storage import scheme as storage_scheme
from autotune.yamlfile import Section

DEPLOY_MODES = ("local-process", "local-systemd", "ssh")
SAMPLERS = ("auto", "gp", "tpe", "random", "optuna-gp")
OBJECTIVE_MODES = ("geomean", "single", "pareto", "goodput", "max_rate")
#: Modes whose value comes from the open-loop `benchmark.request_rate` levels.
RATE_MODES = ("goodput", "max_rate")
BUILTIN_WORKLOADS = ("natural", "copy", "greedy", "random")
ENDPOINTS = ("chat", "completions", "generate")
ON_FINISH = ("apply-best", "restore", "leave", "stop")


@dataclass(frozen=True)
class StudyConfig:
    name: str = "autotune"
    storage: str = "sqlite:///autotune.db"
    n_trials: int = 30
    sampler: Literal["auto", "gp", "tpe", "random", "optuna-gp"] = "auto"
    seed: int | None = None
    startup_trials: int | None = None
    """Random proposals before the model; None: the sampler's own default (gp 2, tpe 6)."""
    on_finish: Literal["apply-best", "restore", "leave", "stop"] = "apply-best"
    """Unset in the file: apply-best, or stop with deploy: local-process (a rehearsal server
    ends with autotune unless the config asks to keep it serving)."""
    heartbeat_grace: int = 300
    """Seconds without a heartbeat after which another worker fails a running trial (its
    worker or host died) and queues its config again. Beats come every fifth of it."""
    prune: bool = True
    """Stop a trial after a benchmark level once the model finds it implausible that it
    beats the best so far (geomean objective; `autotune/search/pruning.py`)."""
    predict_capacity: bool = True
    """Do not deploy a config whose max_running_requests the trials so far predict below
    `objective.constraints.min_running_requests` with high confidence
    (`autotune/search/capacity.py`)."""
    performance_model: bool = True
    """Predict every config's value from capacity, acceptance per position and step cost
    fitted to the trials so far, and let the GP learn only what the prediction misses
    (`autotune/search/perf/`); off by itself where the physics does not hold."""


@dataclass(frozen=True)
class TargetConfig:
    unit_file: Path
    unit: str
    engine: str = "sglang"
    deploy: str = "local-process"
    base_url: str = "http://127.0.0.1:30000"
    ready_timeout: float = 900.0
    infra_timeout: float = 3600.0
    api_key_env: str | None = None
    model: str | None = None
    ssh: Mapping[str, Any] = field(default_factory=dict)
    gpu_wait: Mapping[str, Any] | bool | None = None
    systemd: Mapping[str, Any] = field(default_factory=dict)
    unit_copy: Path | None = None
    """A local copy of the host's unit (`autotune init` writes it): validate compares."""
    tunnel: bool | None = None
    """deploy: ssh: reach the server through the SSH link (a local forward to the host's
    loopback). None: when base_url is not set and the unit listens on loopback."""
    base_url_set: bool = True
    """base_url was written in the config (False: the default, or the SSH link's)."""


@dataclass(frozen=True)
class BenchmarkConfig:
    concurrency: tuple[int, ...] = bench_defaults.CONCURRENCY
    workload: str = bench_defaults.WORKLOAD
    max_tokens: int = bench_defaults.MAX_TOKENS
    min_duration: float = bench_defaults.MIN_DURATION
    max_duration: float = bench_defaults.MAX_DURATION
    ci_width: float | None = bench_defaults.CI_WIDTH
    warmup_requests: int | None = None
    endpoint: str = bench_defaults.ENDPOINT
    finalists: int = 3
    finalist_rounds: int = 4  # the most; rounds stop once the leader is clear
    request_rate: tuple[float, ...] = ()
    """Open-loop levels (requests/s), measured after the concurrency levels."""
    arrivals: str = "poisson"
    """poisson, or the path of a trace whose arrival times each rate replays."""
    rate_duration: float = 20.0
    """Seconds of arrivals per rate (the drain comes on top)."""
    load_phase: bool = True
    """Finalists and adaptive probes run the changing-load phase (concurrency up and back)."""
    load_phase_segment: float = 20.0
    """Seconds at each concurrency of the phase."""


@dataclass(frozen=True)
class ConstraintsConfig:
    min_running_requests: int | None = None
    max_ttft_p99_ms: float | None = None
    max_itl_p50_ms: float | None = None
    max_degenerate_share: float | None = 0.2
    """Above this share of looping replies a config produces garbage fast (greedy is exempt).
    null turns it off: a small model that loops whatever the speculative setting."""


@dataclass(frozen=True)
class SloConfig:
    """What one request must meet to count towards goodput."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    attainment: float = 0.9
    """A rate meets the SLOs when at least this share of its requests is good."""


@dataclass(frozen=True)
class ObjectiveConfig:
    mode: Literal["geomean", "single", "pareto", "goodput", "max_rate"] = "geomean"
    level: int | None = None
    constraints: ConstraintsConfig = field(default_factory=ConstraintsConfig)
    rate: float | None = None
    """mode goodput: the request rate whose goodput is maximised."""
    slo: SloConfig = field(default_factory=SloConfig)


@dataclass(frozen=True)
class WorkerConfig:
    """One host of a study with several: its name and its own target."""

    name: str
    target: TargetConfig


@dataclass(frozen=True)
class Config:
    source: str
    study: StudyConfig
    target: TargetConfig
    space: SearchSpace
    space_source: str
    benchmark: BenchmarkConfig
    objective: ObjectiveConfig
    workers: tuple[WorkerConfig, ...] = ()
    """`workers:` of the file: one host each (empty: `target` is the only one)."""
    worker: str | None = None
    """The worker this process is (None: the config's only target)."""

    def for_worker(self, name: str) -> Config:
        """This config as seen by one of its workers: its target is that worker's."""
        import dataclasses

        for w in self.workers:
            if w.name == name:
                return dataclasses.replace(self, target=w.target, worker=name)
        names = ", ".join(w.name for w in self.workers) or "none"
        raise ConfigError(self.source, "workers", f"no worker named {name!r} (workers: {names})")

    def warmup(self) -> str:
        """What every level sends before measuring, the same in every trial (a speculator
        that learns from what it served starts each trial from the same state)."""
        from autotune.bench.result import LevelSettings

        n = self.benchmark.warmup_requests
        count = "one request per concurrency slot" if n is None else f"{n} requests"
        tokens = LevelSettings(concurrency=1).warmup_max_tokens
        return (
            f"{count} of at most {tokens} tokens, the workload's first prompts in the "
            f"study's order, on a freshly started server"
        )

    def summary(self) -> dict[str, Any]:
        """The settings a study ran with, JSON-safe, without secrets (for the study record)."""
        from autotune.store.storage import redact

        return {
            "config_file": self.source,
            "study": {**vars(self.study), "storage": redact(self.study.storage)},
            "workers": [w.name for w in self.workers],
            "target": {
                "engine": self.target.engine,
                "deploy": self.target.deploy,
                "unit": self.target.unit,
                "unit_file": str(self.target.unit_file),
                "base_url": self.target.base_url,
            },
            "search_space": self.space_source,
            "benchmark": {
                **vars(self.benchmark),
                "concurrency": list(self.benchmark.concurrency),
                "request_rate": list(self.benchmark.request_rate),
                "warmup": self.warmup(),
            },
            "objective": {
                "mode": self.objective.mode,
                "level": self.objective.level,
                "constraints": vars(self.objective.constraints),
                **({"rate": self.objective.rate} if self.objective.rate is not None else {}),
                **({"slo": vars(self.objective.slo)} if self.benchmark.request_rate else {}),
            },
        }


# -- loading ------------------------------------------------------------------
def load_config(path: str | Path | None = None, *, demo: bool = False) -> Config:
    """Load `path`, or ./autotune.yaml, or with `demo` the built-in demo (whose study lives
    in the working directory: the demo's own folder may not be writable).

    Never the demo by default: an operator who forgot to `cd ~/tuning` would have it start a
    simulated server on the real SGLang's port and call that a study."""
    storage_dir: Path | None = None
    if demo:
        path = resources.demo_config()
        storage_dir = Path.cwd()
    elif path is None:
        path = Path("autotune.yaml")
        if not path.exists():
            raise ConfigError(
                None,
                None,
                f"no autotune.yaml in {Path.cwd()}: give --config FILE, write one with "
                "autotune init, or try the built-in demo with --demo",
            )
    path = Path(path)
    data = yamlfile.read(path, "config file")
    return config_from_dict(data, str(path), path.resolve().parent, storage_dir=storage_dir)


def config_from_dict(
    data: Any, file: str, base_dir: Path, *, storage_dir: Path | None = None
) -> Config:
    top = Section(file, "", data)
    workers = _workers(top, base_dir)
    target = workers[0].target if workers else _target(top.section("target"), base_dir)
    study = _study(top.section("study"), target.deploy, storage_dir or base_dir)
    space, space_source = _space(top, base_dir)
    benchmark = _benchmark(top.section("benchmark"), base_dir)
    objective = _objective(top.section("objective"), benchmark)
    top.finish()
    if study.on_finish == "stop" and target.deploy != "local-process":
        raise ConfigError(
            file,
            "study.on_finish",
            "stop applies to deploy: local-process only (a GPU host's "
            "service is never left stopped); use apply-best, restore or leave",
        )
    if space.engine and space.engine != target.engine:
        raise ConfigError(
            space_source, "engine", f"is {space.engine!r} but target.engine is {target.engine!r}"
        )
    _check_sampler(file, study, space, objective)
    if workers and storage_scheme(study.storage) == "sqlite" and len(workers) > 1:
        hosts = {_host_of(w.target) for w in workers}
        if len(hosts) > 1:
            raise ConfigError(
                file,
                "study.storage",
                "workers on several hosts need a database they all reach: "
                "postgresql+psycopg://... (a SQLite file lives on one machine)",
            )
    return Config(file, study, target, space, space_source, benchmark, objective, workers)


def absolute_sqlite(url: str, base_dir: Path) -> str:
    """A relative SQLite path (`sqlite:///autotune.db`) made relative to `base_dir`.

    In the file it is relative to the file's folder, as every path of a config is; on
    the command line (`--storage`), to the working directory. Any other URL is unchanged.
    """
    prefix = "sqlite:///"
    if not url.startswith(prefix) or url[len(prefix) :].startswith(("/", ":memory:")):
        return url
    rest = url[len(prefix) :]
    if not rest:
        return url
    path, sep, query = rest.partition("?")
    return f"{prefix}{(base_dir / os.path.expanduser(path)).resolve()}{sep}{query}"


def _host_of(t: TargetConfig) -> str:
    """Where a worker runs its server: the SSH host, else this machine."""
    return str(t.ssh.get("host", "")) if t.deploy == "ssh" else "localhost"


def _workers(top: Section, base_dir: Path) -> tuple[WorkerConfig, ...]:
    """`workers:` — each a mapping of target keys (plus `name`) laid over `target:`."""
    raw = top.get("workers")
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise top.error("workers", "must be a non-empty list of target overrides (one per host)")
    base = top.get("target") or {}
    if not isinstance(base, dict):
        raise top.error("target", f"must be a mapping, got {yamlfile.show(base)}")
    out: list[WorkerConfig] = []
    for i, item in enumerate(raw):
        path = f"workers[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(
                top.file, path, f"must be a mapping of target keys, got {yamlfile.show(item)}"
            )
        over = dict(item)
        name = over.pop("name", None)
        merged = _deep_merge(base, over)
        target = _target(Section(top.file, path, merged), base_dir)
        if name is None:
            name = str(target.ssh.get("host")) if target.deploy == "ssh" else f"worker-{i + 1}"
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise ConfigError(top.file, f"{path}.name", f"must be a short name, got {name!r}")
        if any(w.name == name for w in out):
            raise ConfigError(top.file, f"{path}.name", f"{name!r} is used twice")
        out.append(WorkerConfig(name, target))
    seen: dict[tuple[str, str], str] = {}
    for w in out:
        where = (_host_of(w.target), w.target.base_url)
        if where in seen:
            raise ConfigError(
                top.file,
                "workers",
                f"{seen[where]} and {w.name} drive the same server ({w.target.base_url} on "
                f"{where[0]}): one worker per host",
            )
        seen[where] = w.name
    return tuple(out)


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _check_sampler(
    file: str, study: StudyConfig, space: SearchSpace, objective: ObjectiveConfig
) -> None:
    if study.sampler != "gp":
        return
    if objective.mode == "pareto":
        problem = "gp models one objective, objective.mode pareto has several; use auto or tpe"
        raise ConfigError(file, "study.sampler", problem)
    if not space.enumerable():
        problem = (
            f"gp scores every config of the space, and {space.source} has a float range "
            f"or more than {ENUMERABLE_LIMIT} configs; use auto or tpe"
        )
        raise ConfigError(file, "study.sampler", problem)


def _study(s: Section, deploy: str, base_dir: Path) -> StudyConfig:
    d = StudyConfig()
    raw = s.str("storage", d.storage)
    if raw.startswith("sqlite:") and not raw.startswith("sqlite:///") and raw != "sqlite://":
        raise s.error(
            "storage",
            f"{raw!r} is not a SQLite URL: three slashes, sqlite:///autotune.db (beside "
            "this file) or sqlite:////var/lib/autotune/autotune.db (absolute)",
        )
    storage = absolute_sqlite(raw, base_dir)
    if storage_scheme(storage) not in ("sqlite", "postgresql"):
        raise s.error(
            "storage",
            "must be a URL like sqlite:///autotune.db or postgresql+psycopg://user@host/db; "
            f"got {redact(storage)!r}",
        )
    out = StudyConfig(
        name=s.str("name", d.name),
        storage=storage,
        n_trials=s.int("n_trials", d.n_trials, minimum=1),
        sampler=s.str("sampler", d.sampler, SAMPLERS),
        seed=s.int("seed", None),
        startup_trials=s.int("startup_trials", None, minimum=0),
        on_finish=s.str(
            "on_finish", "stop" if deploy == "local-process" else d.on_finish, ON_FINISH
        ),
        heartbeat_grace=s.int("heartbeat_grace", d.heartbeat_grace, minimum=5),
        prune=s.bool("prune", d.prune),
        predict_capacity=s.bool("predict_capacity", d.predict_capacity),
        performance_model=s.bool("performance_model", d.performance_model),
    )
    s.finish()
    return out


def _target(s: Section, base_dir: Path) -> TargetConfig:
    engine = s.str("engine", "sglang", engine_names())
    deploy = s.str("deploy", "local-process", DEPLOY_MODES)
    raw_unit_file = s.str("unit_file")
    unit = s.str("unit")
    if raw_unit_file is None and unit is None:
        raise s.error("unit_file", "is required: the path of the server's systemd unit file")
    if deploy == "local-process":
        if raw_unit_file is None:
            raise s.error("unit_file", "is required for deploy: local-process")
        unit_file = _local_path(base_dir, raw_unit_file)
        if not unit_file.is_file():
            raise s.error("unit_file", f"file not found: {unit_file}")
    else:
        unit_file = Path(raw_unit_file or f"/etc/systemd/system/{unit}")
        if not unit_file.is_absolute():
            raise s.error("unit_file", f"must be an absolute path on the host: {raw_unit_file!r}")
    unit = unit or unit_file.name
    if not unit.endswith(".service") or "/" in unit:
        raise s.error("unit", f"must be a unit name like sglang.service, got {unit!r}")
    base_url_set = s.get("base_url") is not None
    base_url = s.str("base_url", "http://127.0.0.1:30000")
    tunnel = s.get("tunnel")
    if tunnel is not None and not isinstance(tunnel, bool):
        raise s.error("tunnel", f"must be true or false (or left out), got {yamlfile.show(tunnel)}")
    if tunnel and deploy != "ssh":
        raise s.error("tunnel", f"only applies to deploy: ssh (deploy is {deploy})")
    parsed = urlparse(base_url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise s.error("base_url", f"must be a URL like http://127.0.0.1:30000; got {base_url!r}")
    ssh = s.get("ssh")
    if ssh is not None and not isinstance(ssh, dict):
        raise s.error("ssh", "must be a mapping")
    if deploy == "ssh" and not ssh:
        raise s.error("ssh", "is required for deploy: ssh (at least host)")
    gpu_wait = s.get("gpu_wait")
    if gpu_wait is not None and not isinstance(gpu_wait, (dict, bool)):
        raise s.error("gpu_wait", "must be a mapping (or true for the defaults)")
    systemd = s.get("systemd")
    if systemd is not None and not isinstance(systemd, dict):
        raise s.error("systemd", "must be a mapping")
    out = TargetConfig(
        unit_file=unit_file,
        unit=unit,
        engine=engine,
        deploy=deploy,
        base_url=base_url.rstrip("/"),
        ready_timeout=s.number("ready_timeout", 900.0, minimum=1),
        infra_timeout=s.number("infra_timeout", 3600.0, minimum=0),
        api_key_env=s.str("api_key_env"),
        model=s.str("model"),
        ssh=dict(ssh or {}),
        gpu_wait=gpu_wait,
        systemd=dict(systemd or {}),
        unit_copy=_local_path(base_dir, s.str("unit_copy")) if s.get("unit_copy") else None,
        tunnel=tunnel,
        base_url_set=base_url_set,
    )
    s.finish()
    _check_deploy_settings(out, s.file)
    return out


def _check_deploy_settings(t: TargetConfig, file: str) -> None:
    """Build the transport settings once so a bad key fails at load time, naming the key."""
    from autotune.deploy import settings

    settings.systemd_settings(t.unit, str(t.unit_file), t.systemd, file)
    settings.gpu_wait_settings(t.gpu_wait, file)
    if t.deploy == "ssh":
        settings.ssh_settings(t.ssh, file)


def _space(top: Section, base_dir: Path) -> tuple[SearchSpace, str]:
    raw = top.get("search_space")
    if raw is None:
        raise top.error("search_space", "is required: a file under search_spaces/ or a mapping")
    if isinstance(raw, dict):
        return space_from_dict(raw, f"{top.file}: search_space"), "inline"
    if not isinstance(raw, str):
        got = yamlfile.show(raw)
        raise top.error("search_space", f"must be a file name or a mapping, got {got}")
    path = _local_path(base_dir, raw)
    if not path.exists():
        builtin = resources.search_space(raw)
        if builtin is None:
            raise top.error("search_space", f"file not found: {path}")
        path = builtin
    return load_space(path), str(path)


def _benchmark(s: Section, base_dir: Path) -> BenchmarkConfig:
    d = BenchmarkConfig()
    levels = s.get("concurrency", list(d.concurrency))
    if isinstance(levels, int) and not isinstance(levels, bool):
        levels = [levels]
    if (
        not isinstance(levels, list)
        or not levels
        or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in levels)
    ):
        raise s.error("concurrency", f"must be a list of positive whole numbers, got {levels!r}")
    if len(set(levels)) != len(levels):
        raise s.error("concurrency", f"has duplicate levels: {levels}")
    workload = s.str("workload", d.workload)
    if workload not in BUILTIN_WORKLOADS and not re.fullmatch(r"random:[1-9]\d*", workload):
        path = _local_path(base_dir, workload)
        if not path.is_file():
            raise s.error(
                "workload",
                f"must be natural, copy, greedy, random[:N] or a JSONL file; "
                f"{workload!r} is none of these",
            )
        workload = str(path)
    min_d = s.number("min_duration", d.min_duration, minimum=0.5)
    max_d = s.number("max_duration", max(d.max_duration, min_d), minimum=0.5)
    if max_d < min_d:
        raise s.error("max_duration", f"({max_d}) must be at least min_duration ({min_d})")
    ci = s.get("ci_width", d.ci_width)
    fraction = isinstance(ci, (int, float)) and not isinstance(ci, bool) and 0 < ci < 1
    if ci is not None and not fraction:
        raise s.error("ci_width", f"must be a fraction in (0, 1) (0.02 = ±2 %) or null; got {ci!r}")
    out = BenchmarkConfig(
        concurrency=tuple(sorted(levels)),
        workload=workload,
        max_tokens=s.int("max_tokens", d.max_tokens, minimum=1),
        min_duration=min_d,
        max_duration=max_d,
        ci_width=float(ci) if ci is not None else None,
        warmup_requests=s.int("warmup_requests", None, minimum=0),
        endpoint=s.str("endpoint", d.endpoint, ENDPOINTS),
        finalists=s.int("finalists", d.finalists, minimum=0),
        finalist_rounds=s.int("finalist_rounds", d.finalist_rounds, minimum=0),
        request_rate=_rates(s),
        arrivals=_arrivals(s, base_dir),
        rate_duration=s.number("rate_duration", d.rate_duration, minimum=1),
        load_phase=s.bool("load_phase", d.load_phase),
        load_phase_segment=s.number("load_phase_segment", d.load_phase_segment, minimum=2),
    )
    s.finish()
    return out


def _rates(s: Section) -> tuple[float, ...]:
    raw = s.get("request_rate", [])
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        raw = [raw]
    ok = isinstance(raw, list) and all(
        isinstance(r, (int, float)) and not isinstance(r, bool) and 0 < r < 1e6 for r in raw
    )
    if not ok:
        raise s.error("request_rate", f"must be a list of positive requests/s, got {raw!r}")
    if len(set(raw)) != len(raw):
        raise s.error("request_rate", f"has duplicate rates: {raw}")
    return tuple(sorted(float(r) for r in raw))


def _arrivals(s: Section, base_dir: Path) -> str:
    from autotune.bench.arrivals import TraceError, load_trace

    raw = s.str("arrivals", "poisson")
    if raw == "poisson":
        return raw
    path = _local_path(base_dir, raw)
    try:
        load_trace(path)
    except TraceError as exc:
        raise s.error("arrivals", f"poisson or a trace file; {exc}") from None
    return str(path)


def _objective(s: Section, bench: BenchmarkConfig) -> ObjectiveConfig:
    mode = s.str("mode", "geomean", OBJECTIVE_MODES)
    level = s.int("level", None, minimum=1)
    if mode == "single":
        if level is None:
            raise s.error("level", "is required with mode: single (the concurrency to optimise)")
        if level not in bench.concurrency:
            raise s.error(
                "level", f"{level} is not one of benchmark.concurrency {list(bench.concurrency)}"
            )
    elif level is not None:
        raise s.error("level", f"only applies to mode: single (mode is {mode})")
    rate = s.number("rate", None)
    if mode in RATE_MODES and not bench.request_rate:
        raise s.error("mode", f"{mode} scores the open-loop levels: set benchmark.request_rate")
    if mode == "goodput":
        if rate is None:
            raise s.error("rate", "is required with mode: goodput (the request rate to serve)")
        if rate not in bench.request_rate:
            raise s.error(
                "rate", f"{rate:g} is not one of benchmark.request_rate {list(bench.request_rate)}"
            )
    elif rate is not None:
        raise s.error("rate", f"only applies to mode: goodput (mode is {mode})")
    c = s.section("constraints")
    constraints = ConstraintsConfig(
        min_running_requests=c.int("min_running_requests", None, minimum=1),
        max_ttft_p99_ms=c.number("max_ttft_p99_ms", None, minimum=0),
        max_itl_p50_ms=c.number("max_itl_p50_ms", None, minimum=0),
        max_degenerate_share=_share(c, "max_degenerate_share", 0.2),
    )
    c.finish()
    slo = _slo(s.section("slo"), constraints)
    if mode in RATE_MODES and slo.ttft_ms is None and slo.tpot_ms is None:
        raise s.error("slo", f"mode {mode} needs a target: objective.slo.ttft_ms and/or tpot_ms")
    s.finish()
    return ObjectiveConfig(mode=mode, level=level, constraints=constraints, rate=rate, slo=slo)


def _slo(s: Section, constraints: ConstraintsConfig) -> SloConfig:
    """Without its own targets a request is held to the constraints' latency limits."""
    if not s.data:
        return SloConfig(constraints.max_ttft_p99_ms, constraints.max_itl_p50_ms)
    attainment = s.number("attainment", 0.9)
    if not 0 < attainment <= 1:
        raise s.error("attainment", f"must be a share in (0, 1], got {attainment:g}")
    out = SloConfig(
        ttft_ms=s.number("ttft_ms", None, minimum=0),
        tpot_ms=s.number("tpot_ms", None, minimum=0),
        attainment=attainment,
    )
    s.finish()
    return out


def _share(s: Section, name: str, default: float) -> float | None:
    v = s.get(name, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
        raise s.error(name, f"must be a share between 0 and 1, or null to turn it off; got {v!r}")
    return float(v)


def _local_path(base_dir: Path, raw: str) -> Path:
    """A path on this machine, relative to the config's folder: `..` is what people write,
    so it is resolved here (lexically, as a shell would print it), not refused later."""
    p = Path(os.path.expanduser(raw))
    return Path(os.path.normpath(p if p.is_absolute() else base_dir / p))
