"""A simulated cell (space x simulator profile x workload x objective) and its true landscape.

A cell is turned into the same `Config` a user's autotune.yaml would give, so a study
played on it runs with the real space encoding, objective and constraints. The
landscape is the simulator's noise-free value of every config of the space, scored the
way the study scores it (`autotune.sim.truth`). The in-process server
(`testservers/simulated.py`) draws its measurements around it; the tests and the
experiments (`experiments/efficiency/`, which adds cells measured by others) both play
studies on it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune import resources
from autotune.config import Config, config_from_dict
from autotune.sim import truth
from autotune.sim.profiles import DEFAULT_PROFILE, get_profile
from autotune.sim.truth import Truth
from autotune.testservers.cost import DeploymentCost
from autotune.unit import unitfile

SPACES = ("sglang-eagle", "sglang-mtp")
WORKLOADS = ("natural", "greedy")
#: Objective name -> the `objective` and `benchmark.concurrency` a user would write.
OBJECTIVES: dict[str, tuple[dict[str, Any], list[int]]] = {
    "c1": ({"mode": "single", "level": 1}, [1]),
    "geomean": ({"mode": "geomean", "constraints": {"min_running_requests": 16}}, [1, 16, 64]),
}
PROFILE_SHORT = {
    "qwen3.5-122b-a10b-mtp": "qwen",
    "llama3.1-8b-eagle3-h100": "llama",
    "deepseek-v3-mtp-8xh200": "deepseek",
}
#: The unit's speculative settings before tuning: what SGLang chooses itself when a unit
#: names no knob -- (5, 4, 8) for Llama models, (3, 1, 4) for most others (engine-facts).
SGLANG_AUTO = {"llama3.1-8b-eagle3-h100": (5, 4, 8)}
SGLANG_AUTO_OTHERS = (3, 1, 4)
FLAGS = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")


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
    cost: DeploymentCost | None = None
    """What a deployment costs, where the landscape states it (a replayed recording);
    None: the simulator profile's (`cost.Cost`)."""

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

    @classmethod
    def of(cls, cfg: Config, table: list[Truth], profile: str = DEFAULT_PROFILE) -> Landscape:
        return cls(cfg, {cfg.space.key(t.config): t for t in table}, truth.optimum(table), profile)


def unit_file() -> str:
    """The demo's unit (the simulator's launch flags): every cell's target."""
    path = resources.example("sglang-sim.service")
    if path is None:
        raise FileNotFoundError("examples/sglang-sim.service is not installed")
    return path.read_text()


def data(cell: Cell, study: dict[str, Any] | None = None) -> dict[str, Any]:
    """The autotune.yaml a user tuning this cell would write (the demo's unit as the
    target), before `objective` and `benchmark.concurrency` are filled in."""
    space = resources.search_space(cell.space) or cell.space
    unit = resources.example("sglang-sim.service")
    return {
        "study": {"name": "efficiency", "storage": "sqlite:///:memory:", **(study or {})},
        "target": {"engine": "sglang", "deploy": "local-process", "unit_file": str(unit)},
        "search_space": str(space),
        "benchmark": {"workload": cell.workload, "max_tokens": 256},
    }


def config(cell: Cell, study: dict[str, Any] | None = None) -> Config:
    """The Config of a simulated cell."""
    objective, levels = OBJECTIVES[cell.objective]
    d = data(cell, study)
    d["objective"] = objective
    d["benchmark"]["concurrency"] = levels
    return config_from_dict(d, f"<cell {cell.label}>", Path(d["search_space"]).parent)


@functools.cache
def landscape(cell: Cell) -> Landscape:
    """The simulator's landscape of a simulated cell (cached: it is the same every time)."""
    cfg = config(cell)
    return Landscape.of(cfg, simulated_table(cfg, unit_file(), cell.profile, cell.workload),
                        cell.profile)  # fmt: skip


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


def baseline_flags(cell: Cell, start: tuple[int, int, int] | None = None) -> dict[str, str | None]:
    """The demo unit's flags with the cell's starting point: the study's baseline (trial 0).
    `start`: (steps, topk, draft tokens); None: what SGLang picks itself for the profile."""
    flags = unitfile.flags(unitfile.parse_exec_start(unit_file()).argv)
    start = start or SGLANG_AUTO.get(cell.profile, SGLANG_AUTO_OTHERS)
    return {**flags, **{flag: str(v) for flag, v in zip(FLAGS, start, strict=True)}}
