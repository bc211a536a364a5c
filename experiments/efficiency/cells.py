"""The efficiency tables' cells: the simulator's (`autotune/testservers/landscape.py`), then
the foreign ones (`foreign.py`: measured by others), then the replayed real llama-server
(`replay.py`: recorded here), each with its true landscape.
"""

from __future__ import annotations

import functools
from typing import Any

from autotune.config import Config
from autotune.sim import truth
from autotune.sim.profiles import PROFILES
from autotune.testservers import landscape as simulated
from autotune.testservers.landscape import (
    OBJECTIVES,
    SPACES,
    WORKLOADS,
    Cell,
    Landscape,
    simulated_table,
)

from . import foreign, replay

__all__ = ["SPACES", "Cell", "Landscape", "all_cells", "baseline_flags", "cell_config", "landscape"]

#: Objectives only the foreign cells score (their sources measured batch 64 alone).
FOREIGN_OBJECTIVES: dict[str, tuple[dict[str, Any], list[int]]] = {
    "c64": ({"mode": "single", "level": 64}, [64]),
}


def all_cells() -> list[Cell]:
    """The simulator's cells, then the foreign ones (`foreign.py`: measured by others), then
    the replayed real llama-server (`replay.py`: recorded here)."""
    simulated_cells = [
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
    return simulated_cells + measured + recorded


def _workload(name: str) -> str:
    source = foreign.by_name(name)
    return source.base[2] if isinstance(source, foreign.Cost) else "natural"


def cell_config(cell: Cell, study: dict[str, Any] | None = None) -> Config:
    """The Config a user tuning this cell would have (the demo's unit file as the target)."""
    if cell.space == replay.SPACE:
        return replay.study_config(cell.workload)
    if cell.space != foreign.SPACE:
        return simulated.config(cell, study)
    source = foreign.by_name(cell.profile)
    if isinstance(source, foreign.Cost):
        return cell_config(Cell(*source.base), study)
    objective, levels = {**OBJECTIVES, **FOREIGN_OBJECTIVES}[cell.objective]
    data = simulated.data(cell, study)
    data["objective"] = objective
    data["benchmark"]["concurrency"] = levels
    return foreign.config(source, data)


@functools.cache
def landscape(cell: Cell) -> Landscape:
    if cell.space == replay.SPACE:
        cfg = replay.study_config(cell.workload)
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
    if cell.space != foreign.SPACE:
        return simulated.landscape(cell)
    cfg = cell_config(cell)
    source = foreign.by_name(cell.profile)
    if isinstance(source, foreign.Cost):
        base = landscape(Cell(*source.base))
        return Landscape.of(cfg, foreign.with_cost(source, list(base.by_key.values()), cfg),
                            base.profile)  # fmt: skip
    host = simulated_table(cfg, simulated.unit_file(), source.host_profile, "natural")
    table = foreign.table(source, cfg, host)
    by_key = {cfg.space.key(t.config): t for t in table}
    return Landscape(cfg, by_key, truth.optimum(table), source.host_profile, source.noise)


def baseline_flags(cell: Cell) -> dict[str, str | None]:
    """The demo unit's flags with the cell's starting point: the study's baseline (trial 0)."""
    if cell.space == replay.SPACE:
        return replay.baseline_flags()
    source = foreign.by_name(cell.profile) if cell.space == foreign.SPACE else None
    if isinstance(source, foreign.Cost):
        return baseline_flags(Cell(*source.base))
    return simulated.baseline_flags(cell, source.baseline if source is not None else None)
