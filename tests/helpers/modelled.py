"""A study played against the simulator's model in process: autotune's own worker loop, the
default sampler, no server (the sample-efficiency benchmark's `SimulatedServer`)."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping
from typing import Any

import optuna

from autotune.search import records
from autotune.search import study as st
from autotune.testservers.in_memory import in_memory_study, run_to
from autotune.testservers.landscape import Cell, baseline_flags, landscape
from autotune.testservers.simulated import SimulatedServer


def run_study(
    cell: Cell, deployments: int, seed: int, earlier: Mapping[str, Any] | None = None
) -> tuple[optuna.Study, SimulatedServer]:
    """Trials until `deployments` servers were (notionally) started, or 3 times as many trials.
    `earlier`: a warm start's record, as `start --from` writes it before the first trial."""
    land = landscape(cell)
    cfg = dataclasses.replace(land.cfg, study=dataclasses.replace(land.cfg.study, seed=seed))
    study = in_memory_study(cfg, st.make_sampler(cfg))
    baseline = st.baseline_of(cfg.space, baseline_flags(cell))
    st.enqueue_baseline_once(study, baseline)
    if earlier is not None:
        study.set_user_attr(records.STUDY_WARM_START, dict(earlier))
    server = SimulatedServer(land, random.Random(seed))
    total = 0
    while len(server.deployed) < deployments and total < 3 * deployments:
        total += 1
        run_to(cfg, study, server, baseline, total)
    return study, server
