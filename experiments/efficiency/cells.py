"""A benchmark cell (space x simulator profile x workload x objective) and its true landscape.

A cell is turned into the same `Config` a user's autotune.yaml would give, so
the study runs with the real space encoding, objective and constraints. The
landscape is the simulator's noise-free value of every config of the space,
scored the way the study scores it (`autotune.sim.truth`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.config import Config, config_from_dict
from autotune.sim import truth
from autotune.sim.profiles import DEFAULT_PROFILE, PROFILES, get_profile
from autotune.sim.truth import Truth
from autotune.unit import unitfile

from . import foreign, replay

REPO = Path(__file__).resolve().parents[2]
UNIT_FILE = REPO / "examples" / "sglang-sim.service"

SPACES = ("sglang-eagle", "sglang-mtp")
WORKLOADS = ("natural", "greedy")
#: Objective name -> the `objective` and `benchmark.concurrency` a user would write.
OBJECTIVES: dict[str, tuple[dict[str, Any], list[int]]] = {
    "c1": ({"mode": "single", "level": 1}, [1]),
    "geomean": ({"mode": "geomean", "constraints": {"min_running_requests": 16}}, [1, 16, 64]),
}
#: Objectives only the foreign cells score (their sources measured batch 64 alone).
FOREIGN_OBJECTIVES: dict[str, tuple[dict[str, Any], list[int]]] = {
    "c64": ({"mode": "single", "level": 64}, [64]),
}
PROFILE_SHORT = {
    "qwen3.5-122b-a10b-mtp": "qwen",
    "llama3.1-8b-eagle3-h100": "llama",
    "deepseek-v3-mtp-8xh200": "deepseek",
}


@dataclass(frozen=True, order=True)
class Cell:
    space: str
    profile: str
    workload: str
    objective: str

    @property
    def label(self) -> str:
        short = PROFILE_SHORT.get(self.profile, self.profile)
        return f"{self.space.removeprefix('sglang-')} {short} {self.workload} {self.objective}"


def all_cells() -> list[Cell]:
    """The simulator's cells, then the foreign ones (`foreign.py`: measured by others), then
    the replayed real llama-server (`replay.py`: recorded here)."""
    simulated = [
        Cell(space, profile, workload, objective)
        for space in SPACES
        for objective in OBJECTIVES
        for profile in PROFILES
        for workload in WORKLOADS
    ]
    measured = [
        Cell(foreign.SPACE, name, _workload(name), objective)
        for name in foreign.names()
        for objective in foreign.by_name(name).objectives
    ]
    recorded = [Cell(replay.SPACE, replay.PROFILE, w, "geomean") for w in replay.workloads()]
    return simulated + measured + recorded


def _workload(name: str) -> str:
    source = foreign.by_name(name)
    return source.base[2] if isinstance(source, foreign.Cost) else "natural"


def cell_config(cell: Cell, study: dict[str, Any] | None = None) -> Config:
    """The Config a user tuning this cell would have (the demo's unit file as the target)."""
    if cell.space == replay.SPACE:
        return replay.study_config(cell.workload)
    objective, levels = {**OBJECTIVES, **FOREIGN_OBJECTIVES}[cell.objective]
    data = {
        "study": {"name": "efficiency", "storage": "sqlite:///:memory:", **(study or {})},
        "target": {"engine": "sglang", "deploy": "local-process", "unit_file": str(UNIT_FILE)},
        "search_space": str(REPO / "search_spaces" / f"{cell.space}.yaml"),
        "benchmark": {"concurrency": levels, "workload": cell.workload, "max_tokens": 256},
        "objective": objective,
    }
    if cell.space == foreign.SPACE:
        source = foreign.by_name(cell.profile)
        if isinstance(source, foreign.Cost):
            return cell_config(Cell(*source.base), study)
        return foreign.config(source, data)
    return config_from_dict(data, f"<cell {cell.label}>", REPO)


@dataclass(frozen=True)
class Landscape:
    """Noise-free truth of every valid config of a cell, keyed by `space.key(config)`."""

    cfg: Config
    by_key: dict[tuple[tuple[str, Any], ...], Truth]
    best: Truth
    profile: str = DEFAULT_PROFILE
    """The simulator profile: what a deployment costs to load (`cost.LOAD_S`)."""
    noise: float | None = None
    """The spread to draw measurements at, where the landscape states its own (a foreign
    cell's source); None: the run's."""
    level_sd: dict[int, float] | None = None
    """Each level's window error (log sd), where the landscape states it (a replay cell's
    recording); None: the benchmark's CI target."""
    cost: replay.ReplayCost | None = None
    """What a deployment costs, where the landscape states it (a replay cell's recording,
    `replay.ReplayCost`); None: the simulator profile's (`cost.Cost`)."""

    def truth(self, config: dict[str, Any]) -> Truth:
        return self.by_key[self.cfg.space.key(config)]

    def ratio(self, config: dict[str, Any] | None) -> float:
        """A config's true value as a share of the optimum (0 when infeasible or None)."""
        if config is None:
            return 0.0
        t = self.truth(config)
        return t.value / self.best.value if t.feasible else 0.0

    @property
    def size(self) -> int:
        return len(self.by_key)


@functools.cache
def landscape(cell: Cell) -> Landscape:
    cfg = cell_config(cell)
    if cell.space == replay.SPACE:
        table = replay.table(cell.workload, cfg)
        spread = replay.recording().spread(cell.workload)
        by_key = {cfg.space.key(t.config): t for t in table}
        return Landscape(
            cfg,
            by_key,
            truth.optimum(table),
            replay.PROFILE,
            spread.deployment,
            spread.level,
            replay.ReplayCost(cfg.benchmark),
        )
    unit = UNIT_FILE.read_text()
    if cell.space == foreign.SPACE:
        source = foreign.by_name(cell.profile)
        if isinstance(source, foreign.Cost):
            base = landscape(Cell(*source.base))
            table = foreign.with_cost(source, list(base.by_key.values()), cfg)
            by_key = {cfg.space.key(t.config): t for t in table}
            return Landscape(cfg, by_key, truth.optimum(table), base.profile)
        host = simulated_table(cfg, unit, source.host_profile, "natural")
        table = foreign.table(source, cfg, host)
        by_key = {cfg.space.key(t.config): t for t in table}
        return Landscape(cfg, by_key, truth.optimum(table), source.host_profile, source.noise)
    table = simulated_table(cfg, unit, cell.profile, cell.workload)
    by_key = {cfg.space.key(t.config): t for t in table}
    return Landscape(cfg, by_key, truth.optimum(table), cell.profile)


def simulated_table(cfg: Config, unit: str, profile: str, workload: str) -> list[Truth]:
    """The simulator's noise-free value of every valid config of `cfg`'s space."""
    return truth.space_truth(
        get_profile(profile),
        truth.sim_args_of_unit(unit).launch,
        [c.params for c in cfg.space.enumerate() if c.valid],
        cfg.objective,
        cfg.benchmark.concurrency,
        workload=workload,
        max_tokens=cfg.benchmark.max_tokens,
        input_len=truth.benchmark_input_len(cfg.benchmark.workload, cfg.benchmark.endpoint),
    )


#: The unit's speculative settings before tuning: what SGLang chooses itself when a unit
#: names no knob -- (5, 4, 8) for Llama models, (3, 1, 4) for most others (engine-facts).
SGLANG_AUTO = {"llama3.1-8b-eagle3-h100": (5, 4, 8)}
SGLANG_AUTO_OTHERS = (3, 1, 4)
FLAGS = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")


def baseline_flags(cell: Cell) -> dict[str, str | None]:
    """The demo unit's flags with the cell's starting point: the study's baseline (trial 0)."""
    if cell.space == replay.SPACE:
        return replay.baseline_flags()
    flags = unitfile.flags(unitfile.parse_exec_start(UNIT_FILE.read_text()).argv)
    source = foreign.by_name(cell.profile) if cell.space == foreign.SPACE else None
    if isinstance(source, foreign.Cost):
        return baseline_flags(Cell(*source.base))
    if source is not None:
        start = source.baseline
    else:
        start = SGLANG_AUTO.get(cell.profile, SGLANG_AUTO_OTHERS)
    return {**flags, **{flag: str(v) for flag, v in zip(FLAGS, start, strict=True)}}
