"""Replay cells: the real llama-server's whole space as recorded once, played back.

`experiments/llamacpp_sweep.py` deployed every config of `search_spaces/llamacpp-spec.yaml` on the
real llama-server (a 270M model on this CPU) and measured each level twice in one deployment,
and every third config once more after a redeploy: `experiments/results/raw/llamacpp-sweep.jsonl`.
A replay cell is one workload of that file:

- a config's value is the mean of what its passes measured (per level, in logs), scored as
  the study scores it (`examples/llamacpp-local.yaml`: the geomean of c=1 and c=4, at least
  4 running requests);
- a deployment draws its measurement from that value with the recorded spread: one speed
  factor per start (the spread between deployments of one config, the level spread taken
  out) times each level's own window error (the spread between two passes of one
  deployment, per level);
- its cost is the recording's: the server's start (`START_S`, what the sweep logged), then
  each level's measured window, twice when the recording needed a second run of it.

Only workloads whose every config is in the file make a cell: a partial recording is data
still being taken, not a landscape. The performance model is off on these cells, as on any
n-gram space (no `draft_shape`: no chain to model), so `default` and `no-predict` differ only
in the capacity prediction, which a space without `memory_grows_with` never uses.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.config import BenchmarkConfig, Config, config_from_dict
from autotune.sim.truth import Truth
from autotune.unit import unitfile

from . import foreign

REPO = Path(__file__).resolve().parents[2]
RECORDING = REPO / "experiments" / "results" / "raw" / "llamacpp-sweep.jsonl"
STUDY_CONFIG = REPO / "examples" / "llamacpp-local.yaml"
#: A cell's space field for a replay cell; its profile field is PROFILE.
SPACE = "llamacpp-replay"
PROFILE = "gemma3-270m-cpu"
#: Seconds from restart to ready: the sweep's log gives 1.6-1.8 s for the 270M model.
START_S = 1.7
#: Seconds a level spends outside its window: the warm-up request and the ramp to the first
#: token (the sweep's log: 2-3 s between a level's start and its window).
LEVEL_OVERHEAD_S = 2.5
#: The candidates a replay cell runs: the issue's four (grid is SGLang's sweep order, and
#: `default-generate` SGLang's native endpoint; `today` is `default` with the model off,
#: which it already is here).
CANDIDATES = ("default", "no-predict", "tpe", "random")


@dataclass(frozen=True)
class Spread:
    """The recording's noise, as log standard deviations."""

    deployment: float
    """One start's speed against another's (the level spread taken out)."""
    level: dict[int, float]
    """One window against another in the same deployment, per level."""
    pairs: int
    """Configs with two passes in one deployment (what `level` rests on)."""
    redeployed: int
    """Configs deployed twice (what `deployment` rests on)."""


@dataclass(frozen=True)
class Record:
    config: dict[str, Any]
    failure: str | None
    max_running_requests: int | None
    passes: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Recording:
    path: Path
    header: dict[str, Any]
    records: dict[str, tuple[Record, ...]]
    """Per workload, one record per config, in the order recorded."""

    def spread(self, workload: str) -> Spread:
        return spread(self.records[workload])


@functools.cache
def recording(path: Path = RECORDING) -> Recording:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not lines or "header" not in lines[0]:
        raise ValueError(f"{path}: the first line is not the sweep's header")
    records: dict[str, list[Record]] = defaultdict(list)
    for data in lines[1:]:
        records[data["workload"]].append(
            Record(
                data["config"],
                data["failure"],
                data.get("max_running_requests"),
                tuple(data["passes"]),
            )
        )
    return Recording(path, lines[0]["header"], {w: tuple(rs) for w, rs in records.items()})


def workloads(path: Path = RECORDING) -> list[str]:
    """The workloads recorded over the whole space: the ones that make a cell."""
    if not path.exists():
        return []
    rec = recording(path)
    return [w for w in ("natural", "copy") if w in rec.records and _complete(rec, w)]


def _complete(rec: Recording, workload: str) -> bool:
    space = study_config(workload).space
    done = {space.key(r.config) for r in rec.records[workload]}
    return all(space.key(c.params) in done for c in space.enumerate() if c.valid)


def study_config(workload: str) -> Config:
    """The config the real study uses (`examples/llamacpp-local.yaml`), on `workload`, in
    memory."""
    data = yaml.safe_load(STUDY_CONFIG.read_text())
    data["study"] = {**data["study"], "name": "efficiency", "storage": "sqlite:///:memory:"}
    data["benchmark"] = {**data["benchmark"], "workload": workload}
    return config_from_dict(data, str(STUDY_CONFIG), STUDY_CONFIG.parent)


def baseline_flags() -> dict[str, str | None]:
    """The recorded unit's flags: the study's baseline (no speculation)."""
    unit = (STUDY_CONFIG.parent / "llamacpp-local.service").read_text()
    return unitfile.flags(unitfile.parse_exec_start(unit).argv)


def spread(records: tuple[Record, ...]) -> Spread:
    """Level spread from the two passes of each first deployment (var of a difference is
    twice a window's); deployment spread from the redeployed configs' third pass against the
    first two's mean (var = 2 dep + 1.5 level), pooled over configs and levels."""
    diffs: dict[int, list[float]] = defaultdict(list)
    again: dict[int, list[float]] = defaultdict(list)
    pairs = redeployed = 0
    for r in records:
        first = [p for p in r.passes if p["deployment"] == 1]
        second = [p for p in r.passes if p["deployment"] == 2]
        if len(first) < 2:
            continue
        pairs += 1
        redeployed += bool(second)
        for c in first[0]["levels"]:
            a, b = (math.log(p["levels"][c]["output_throughput"]) for p in first[:2])
            diffs[int(c)].append(a - b)
            if second:
                third = math.log(second[0]["levels"][c]["output_throughput"])
                again[int(c)].append(third - (a + b) / 2)
    level = {c: math.sqrt(statistics.fmean(d * d for d in ds) / 2) for c, ds in diffs.items()}
    dep_var = [
        (statistics.fmean(e * e for e in es) - 1.5 * level[c] ** 2) / 2 for c, es in again.items()
    ]
    deployment = math.sqrt(max(0.0, statistics.fmean(dep_var))) if dep_var else 0.0
    return Spread(deployment, level, pairs, redeployed)


def table(workload: str, cfg: Config) -> list[Truth]:
    """Every config of the space valued as recorded (feasible unless it failed or ran fewer
    requests than the floor)."""
    rec = recording()
    by_key = {cfg.space.key(r.config): r for r in rec.records[workload]}
    floor = cfg.objective.constraints.min_running_requests or 0
    out = []
    for c in cfg.space.enumerate():
        if not c.valid:
            continue
        r = by_key[cfg.space.key(c.params)]
        if r.failure is not None or not r.passes:
            out.append(Truth(c.params, None, False, (0.0,), (), r.failure))
            continue
        running = int(r.max_running_requests or 0)
        levels = tuple(_level(r, int(lv), running) for lv in cfg.benchmark.concurrency)
        value = foreign.value(cfg, levels)
        feasible = running >= floor
        reason = None if feasible else f"max_running_requests {running} < {floor}"
        out.append(
            Truth(c.params, dict(c.params), feasible, (value if feasible else 0.0,), levels, reason)
        )
    return out


def _level(r: Record, c: int, running: int) -> dict[str, Any]:
    """The level as the recording measured it: log-mean throughput over the passes, and the
    window it took (the last pass's: requests x tokens / throughput)."""
    got = [p["levels"][str(c)] for p in r.passes]
    tput = math.exp(statistics.fmean(math.log(g["output_throughput"]) for g in got))
    last = got[-1]
    window = float(last["requests"]) * float(last["mean_output_tokens"])
    window /= float(last["output_throughput"])
    batch = min(c, running)
    return {
        "concurrency": c,
        "output_throughput": tput,
        "batch": batch,
        "max_running_requests": running,
        "tpot_ms": batch * 1000.0 / tput,
        "ttft_ms": None,  # not recorded (and no constraint of this study reads it)
        "mean_output_tokens": float(last["mean_output_tokens"]),
        "request_throughput": tput / float(last["mean_output_tokens"]),
        "accept_length": None,  # the performance model is off on an n-gram space
        "accept_dist": None,
        "window_s": window,
        "ci_halfwidth": float(last["ci_halfwidth"]),
    }


@dataclass(frozen=True)
class ReplayCost:
    """What a replayed deployment costs, from the recording (the interface of `cost.Cost`):
    the start, then each level's recorded window plus its overhead, twice when the
    recording's window was longer than one run may last (the level missed its CI target and
    was measured again)."""

    benchmark: BenchmarkConfig
    load_s: float = START_S
    gpus: int = 1
    """The machine (a CPU here): machine-seconds are what the table calls GPU-seconds."""

    def level_parts(self, level: Mapping[str, Any]) -> tuple[float, float]:
        run = self.window_s(level) + LEVEL_OVERHEAD_S
        return run, run if self.missed(level) else 0.0

    def level_s(self, level: Mapping[str, Any]) -> float:
        return sum(self.level_parts(level))

    def missed(self, level: Mapping[str, Any]) -> bool:
        return float(level["window_s"]) > self.benchmark.max_duration * 1.2

    def window_s(self, level: Mapping[str, Any]) -> float:
        """One run's window (the recorded window is both runs' when there were two)."""
        w = float(level["window_s"])
        return w / 2 if self.missed(level) else w

    def ci(self, level: Mapping[str, Any], window: float) -> float:
        """The recorded CI, scaled to a window this long (a CI shrinks as 1/sqrt(window))."""
        return float(level["ci_halfwidth"]) * math.sqrt(float(level["window_s"]) / window)

    def cut_s(self, level: Mapping[str, Any]) -> float:
        first, _ = self.level_parts(level)
        return first - self.window_s(level) + self.benchmark.min_duration
