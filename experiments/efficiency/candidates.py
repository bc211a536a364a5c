"""The strategies compared: a sampler, its settings, and configs run first.

Every candidate runs through the same study code (`worker.Worker`); only
the `study:` settings, the sampler object and the queue of configs enqueued
after the baseline differ. Candidates are looked up by name so that worker
processes rebuild them (spawn-safe).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from autotune.config import Config
from autotune.search import study as st

from .grid import grid_on_space
from .priors import informative_configs

SamplerFactory = Callable[[Config], optuna.samplers.BaseSampler]
FirstConfigs = Callable[[Config, dict[str, Any] | None], list[dict[str, Any]]]


@dataclass(frozen=True)
class Candidate:
    name: str
    about: str
    study: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Overrides of the `study:` section (sampler, startup_trials), as a user would write them."""
    sampler: SamplerFactory = st.make_sampler
    first: FirstConfigs | None = None
    """Configs enqueued after the baseline (the second argument), run in this order."""
    only_first: bool = False
    """Stop when the queue is done (a fixed plan such as the grid)."""
    raw_best: bool = False
    """Judge the best measurement, not the model's pick that the study declares."""
    needs_torch: bool = False
    judge: str = "gp"
    """How the finalist stage judges its measurements (`autotune.run.finalists.JUDGES`)."""
    benchmark: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Overrides of the `benchmark:` section (finalist_rounds, endpoint)."""


def _tpe(**kw: Any) -> SamplerFactory:
    def build(cfg: Config) -> optuna.samplers.BaseSampler:
        options = {"n_startup_trials": 6, "multivariate": True, **kw}
        return optuna.samplers.TPESampler(seed=cfg.study.seed, constant_liar=False, **options)

    return build


def _docs_batch(cfg: Config, start: dict[str, Any] | None) -> list[dict[str, Any]]:
    return informative_configs(cfg.space, "docs", skip=[start] if start else [])


#: Run by `make bench-efficiency`: what the bar is about, and every kind of alternative.
#: (tpe-group proposes exactly what tpe proposes on these spaces -- every trial has every
#: parameter, so there is one group; tpe-independent and tpe-startup10, TPE's ablations,
#: were measured once in docs/sample-efficiency.md: all three are left to `--candidates
#: all`, which keeps the whole table within 30 minutes.)
CORE = (
    "default",
    "default-generate",
    "today",
    "tpe",
    "random",
    "grid",
)
#: The default before it cut trials short and skipped predictable restarts, and each
#: half alone: what `make bench-efficiency` puts side by side in its GPU-time table.
GPU_TIME = ("before", "no-prune", "no-predict")

CANDIDATES: dict[str, Candidate] = {
    c.name: c
    for c in (
        Candidate("default", "what autotune runs by default (sampler: auto -> gp, 2 startup)"),
        Candidate(
            "tpe",
            "multivariate TPE, 6 startup trials (the default before this benchmark)",
            study={"sampler": "tpe"},
        ),
        Candidate("tpe-independent", "TPE, one knob at a time", sampler=_tpe(multivariate=False)),
        Candidate("tpe-group", "multivariate TPE, group=True", sampler=_tpe(group=True)),
        Candidate(
            "tpe-startup10",
            "multivariate TPE, 10 startup trials",
            study={"sampler": "tpe", "startup_trials": 10},
        ),
        Candidate("random", "random search (with the study's dedupe)", study={"sampler": "random"}),
        Candidate(
            "grid",
            "SGLang's sweep order mapped onto the space, once",
            study={"sampler": "random"},
            first=lambda cfg, _start: grid_on_space(cfg.space),
            only_first=True,
        ),
        Candidate(
            "default-generate",
            "the default benchmarking SGLang's native /generate: acceptance per position "
            "from the per-request histogram, not only the mean",
            benchmark={"endpoint": "generate"},
        ),
        Candidate(
            "today",
            "the default before the performance model (study.performance_model: false)",
            study={"performance_model": False},
        ),
        Candidate(
            "before",
            "today's default without pruning and without the capacity prediction (the default "
            "before GPU time was measured)",
            study={"prune": False, "predict_capacity": False, "performance_model": False},
        ),
        Candidate(
            "no-prune",
            "today's default without pruning (capacity prediction on)",
            study={"prune": False, "performance_model": False},
        ),
        Candidate(
            "no-predict",
            "today's default without the capacity prediction (pruning on)",
            study={"predict_capacity": False, "performance_model": False},
        ),
        # -- ablations and what else was tried (--candidates all) ---------------------
        Candidate(
            "gp-raw-best",
            "default, judged by its best measurement instead of the model's pick",
            raw_best=True,
        ),
        Candidate("gp-startup6", "default with 6 startup trials", study={"startup_trials": 6}),
        Candidate(
            "gp-docs-batch",
            "default after SGLang's documented configs (5,4,8) (5,8,32) (5,1,6)",
            first=_docs_batch,
        ),
        Candidate(
            "finalists-fresh",
            "default, finalists judged on their new measurements alone (sequential, same cap)",
            judge="fresh",
        ),
        Candidate(
            "finalists-median",
            "default, finalists as before: 2 fixed rounds, best median of the new measurements",
            judge="median",
            benchmark={"finalist_rounds": 2},
        ),
        Candidate(
            "optuna-gp",
            "Optuna's GPSampler (needs torch), 6 startup trials",
            study={"sampler": "optuna-gp"},
            needs_torch=True,
        ),
    )
}


def configure(candidate: Candidate, cfg: Config, seed: int) -> Config:
    study = dataclasses.replace(cfg.study, seed=seed, **candidate.study)
    bench = dataclasses.replace(cfg.benchmark, **candidate.benchmark)
    return dataclasses.replace(cfg, study=study, benchmark=bench)
