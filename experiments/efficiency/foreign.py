"""Foreign cells: landscapes measured on real GPUs by someone else, replayed by the harness.

Each is a data file under `experiments/efficiency/foreign/`: the source (issue, PR or paper, the
table, the exact figures), the configs measured with their values as posted, the rule that
filled any value the source did not give (and how many were filled), and the noise to draw
at (the spread the source reports, or a stated default). The cell's space is exactly the
configs measured.

The values the study scores are the source's: output throughput per level (posted as
tok/s, or as the time per output token of one request), and the accept length where the
source gives it. What a source does not give, and the harness needs to play a deployment
out (the TTFT, the model load, the benchmark's window, the spread of a window's acceptance
counts), comes from the simulator profile the file names: it moves the cost and the noise
of a measurement, never the value measured. Where no accept length is posted the level
carries none, as a server that counts none, and the performance model stays off.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autotune.config import Config, config_from_dict
from autotune.sim.truth import Truth

FOREIGN_DIR = Path(__file__).resolve().parent / "foreign"
#: A cell's space field for a foreign cell; its profile field is the file's `name`.
SPACE = "foreign"

Shape = tuple[int, int, int]


@dataclass(frozen=True)
class Row:
    shape: Shape
    tok_s: dict[int, float]
    """Output tok/s per level (batch size), as posted or derived from the posted TPOT."""
    filled: frozenset[int]
    """Levels whose value the file's fill rule gave (the source did not)."""
    accept_length: float | None


@dataclass(frozen=True)
class Source:
    name: str
    path: Path
    url: str
    noise: float
    host_profile: str
    max_running_requests: int
    objectives: tuple[str, ...]
    """The harness's objectives the source measured every level of (c1, c64, geomean)."""
    baseline: Shape
    rows: tuple[Row, ...]

    def levels(self, scored: list[int]) -> tuple[int, int]:
        """(values filled, values scored) over the scored levels."""
        filled = sum(c in r.filled for r in self.rows for c in scored)
        return filled, len(self.rows) * len(scored)


@dataclass(frozen=True)
class Cost:
    """A cost the performance model's form cannot express, as an engine's issue or PR
    measured it, laid on a simulator cell's landscape."""

    name: str
    path: Path
    url: str
    base: tuple[str, str, str, str]
    """The simulator cell: space, profile, workload, objective."""
    rule: str
    """`tree_step`: topk > 1 runs every iteration `factor` times as long; `eager_above_batch`:
    a level whose running batch is above `batch` does."""
    factor: float
    batch: int | None = None

    @property
    def objectives(self) -> tuple[str, ...]:
        return (self.base[3],)

    def slowdown(self, shape: Shape, level: Mapping[str, Any]) -> float:
        """How many times as long this config's iteration takes at this level."""
        if self.rule == "tree_step":
            return self.factor if shape[1] > 1 else 1.0
        assert self.rule == "eager_above_batch" and self.batch is not None
        return self.factor if int(level["batch"]) > self.batch else 1.0


def names() -> list[str]:
    return [load(p).name for p in sorted(FOREIGN_DIR.glob("*.yaml"))]


@functools.cache
def by_name(name: str) -> Source | Cost:
    for p in sorted(FOREIGN_DIR.glob("*.yaml")):
        source = load(p)
        if source.name == name:
            return source
    raise KeyError(f"no foreign cell named {name!r} under {FOREIGN_DIR}")


def load(path: Path) -> Source | Cost:
    data = yaml.safe_load(path.read_text())
    if data.get("kind") == "cost":
        b = data["base"]
        if data["rule"] not in ("tree_step", "eager_above_batch"):
            raise ValueError(f"{path}: rule {data['rule']!r} is not tree_step or eager_above_batch")
        return Cost(
            data["name"],
            path,
            data["source"]["url"],
            (b["space"], b["profile"], b["workload"], b["objective"]),
            data["rule"],
            float(data["factor"]),
            int(data["batch"]) if "batch" in data else None,
        )
    rows = []
    for r in data["rows"]:
        shape = tuple(int(x) for x in r["config"])
        if "tok_s" in r:
            tok_s = {int(c): float(v) for c, v in r["tok_s"].items()}
        else:  # one request's time per output token: tok/s = batch * 1000 / TPOT
            tok_s = {int(c): int(c) * 1000.0 / float(v) for c, v in r["tpot_ms"].items()}
        filled = {int(c): float(v) for c, v in (r.get("filled") or {}).items()}
        al = r.get("accept_length")
        rows.append(
            Row(
                (shape[0], shape[1], shape[2]),
                {**tok_s, **filled},
                frozenset(filled),
                None if al is None else float(al),
            )
        )
    b = data["baseline"]
    return Source(
        data["name"],
        path,
        data["source"]["url"],
        float(data["noise"]),
        data["host_profile"],
        int(data["max_running_requests"]),
        tuple(data["objectives"]),
        (int(b[0]), int(b[1]), int(b[2])),
        tuple(rows),
    )


def space(source: Source) -> dict[str, Any]:
    """The cell's search space: the measured chain depths (every shipped source is chains:
    topk 1, steps + 1 draft tokens)."""
    if any(t != 1 or d != s + 1 for s, t, d in (r.shape for r in source.rows)):
        raise ValueError(f"{source.path}: only chains (topk 1, draft steps + 1) are replayed")
    return {
        "engine": "sglang",
        "params": {
            "speculative_num_steps": {
                "flag": "--speculative-num-steps",
                "type": "int",
                "choices": sorted(r.shape[0] for r in source.rows),
            },
            "speculative_eagle_topk": {
                "flag": "--speculative-eagle-topk",
                "type": "int",
                "value": 1,
            },
            "speculative_num_draft_tokens": {
                "flag": "--speculative-num-draft-tokens",
                "type": "int",
                "value": "speculative_num_steps + 1",
            },
        },
        "memory_grows_with": ["speculative_num_steps"],
        "memory_per_request": (
            "max(speculative_num_steps * speculative_eagle_topk, speculative_num_draft_tokens)"
        ),
        "draft_shape": {
            "steps": "speculative_num_steps",
            "topk": "speculative_eagle_topk",
            "draft": "speculative_num_draft_tokens",
        },
    }


def config(source: Source, data: dict[str, Any]) -> Config:
    """`data` is the Config mapping a simulator cell would have; its space is replaced."""
    return config_from_dict(
        {**data, "search_space": space(source)}, f"<foreign cell {source.name}>", FOREIGN_DIR
    )


def table(source: Source, cfg: Config, host: list[Truth]) -> list[Truth]:
    """Every config of the cell, valued as the source measured it; `host` is the host
    profile's simulated table of the same configs (what the source does not give)."""
    rows = {r.shape: r for r in source.rows}
    out = []
    for t in host:
        c = t.config
        row = rows[
            (
                c["speculative_num_steps"],
                c["speculative_eagle_topk"],
                c["speculative_num_draft_tokens"],
            )
        ]
        levels = [_level(lv, row, source.max_running_requests) for lv in t.levels]
        out.append(Truth(c, t.resolved, True, (value(cfg, levels),), tuple(levels)))
    return out


def _level(host: Mapping[str, Any], row: Row, running: int) -> dict[str, Any]:
    """The host profile's level with the source's values put in: throughput, what follows
    from it at that batch (time per output token, request rate), the accept length."""
    c = int(host["concurrency"])
    if c not in row.tok_s:
        raise ValueError(f"config {row.shape} has no value at batch {c}")
    tput = row.tok_s[c]
    batch = min(c, running)
    level = dict(host)
    level.update(
        output_throughput=tput,
        batch=batch,
        max_running_requests=running,
        tpot_ms=batch * 1000.0 / tput,
        request_throughput=tput / float(host["mean_output_tokens"]),
    )
    if row.accept_length is None:
        level.update(accept_length=None, accept_dist=None)
    else:
        dist = chain_dist(row.accept_length, row.shape[2] - 1)
        level.update(accept_length=row.accept_length, accept_dist=list(dist))
    return level


def with_cost(cost: Cost, base: list[Truth], cfg: Config) -> list[Truth]:
    """The simulator cell's landscape with the cost laid on: each level's throughput divided
    by its slowdown, the value scored again (feasibility is the simulator's)."""
    out = []
    for t in base:
        if not t.feasible or t.resolved is None:
            out.append(t)
            continue
        shape = cfg.space.shape(t.config)
        assert shape is not None
        levels = []
        for lv in t.levels:
            slow = cost.slowdown(shape, lv)
            levels.append(
                {
                    **lv,
                    "output_throughput": float(lv["output_throughput"]) / slow,
                    "tpot_ms": float(lv["tpot_ms"]) * slow,
                    "iteration_ms": float(lv["iteration_ms"]) * slow,
                    "request_throughput": float(lv["request_throughput"]) / slow,
                }
            )
        out.append(
            Truth(t.config, t.resolved, True, (value(cfg, levels),), tuple(levels), t.reason)
        )
    return out


def value(cfg: Config, levels: Sequence[Mapping[str, Any]]) -> float:
    """The objective's value of these levels' throughputs, as the study scores it."""
    tput = [float(lv["output_throughput"]) for lv in levels]
    if cfg.objective.mode == "geomean":
        return math.exp(sum(map(math.log, tput)) / len(tput))
    return tput[list(cfg.benchmark.concurrency).index(cfg.objective.level)]


def chain_dist(mean: float, depth: int) -> tuple[float, ...]:
    """P(tokens per verify step = 1 .. depth + 1) of a chain whose every position is accepted
    at one rate, chosen so that the mean is `mean`: the stated rule for the spread of a
    window's counts where the source posts only the mean."""
    mean = min(max(mean, 1.0), depth + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        if 1.0 + sum(a**i for i in range(1, depth + 1)) < mean:
            lo = a
        else:
            hi = a
    reach = [1.0, *(a**i for i in range(1, depth + 1)), 0.0]
    return tuple(reach[i] - reach[i + 1] for i in range(depth + 1))
