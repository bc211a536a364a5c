"""The strategies compared: a sampler, and optionally configs run first (in order).

Every candidate runs through the same study code; only the sampler and the
queue of configs enqueued after the baseline differ. Candidates are looked up
by name so that worker processes can rebuild them (spawn-safe).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from autotune import study as st
from autotune.config import Config

from .encodings import ENCODINGS
from .grid import grid_on_space

SamplerFactory = Callable[[Config], optuna.samplers.BaseSampler]


@dataclass(frozen=True)
class Candidate:
    name: str
    about: str
    sampler: SamplerFactory = st.make_sampler
    study: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Overrides of the `study:` section (sampler, startup_trials)."""
    first: Callable[[Config], list[dict[str, Any]]] | None = None
    """Configs enqueued after the baseline, run in this order."""
    only_first: bool = False
    """Stop when the queue is done (a fixed plan such as the grid)."""
    needs_torch: bool = False
    encoding: str = "frac"
    """How the space is shown to the sampler (see encodings.py)."""


def _tpe(**kw: Any) -> SamplerFactory:
    def build(cfg: Config) -> optuna.samplers.BaseSampler:
        options = {"n_startup_trials": cfg.study.startup_trials, "multivariate": True, **kw}
        return optuna.samplers.TPESampler(seed=cfg.study.seed, constant_liar=False, **options)

    return build


CANDIDATES: dict[str, Candidate] = {
    c.name: c
    for c in (
        Candidate("default", "make_sampler for the default config"),
        Candidate("random", "random search (with the study's dedupe)", study={"sampler": "random"}),
        Candidate(
            "grid",
            "SGLang's sweep order mapped onto the space",
            study={"sampler": "random"},
            first=lambda cfg: grid_on_space(cfg.space),
            only_first=True,
        ),
        Candidate("tpe-independent", "TPE, multivariate off", sampler=_tpe(multivariate=False)),
        Candidate("tpe-group", "multivariate TPE, group=True", sampler=_tpe(group=True)),
        Candidate("tpe-startup3", "default TPE, 3 startup trials", study={"startup_trials": 3}),
        Candidate("tpe-startup10", "default TPE, 10 startup trials", study={"startup_trials": 10}),
        Candidate("gp", "GPSampler (needs torch)", study={"sampler": "gp"}, needs_torch=True),
    )
}


def configure(candidate: Candidate, cfg: Config, seed: int) -> Config:
    study = dataclasses.replace(cfg.study, seed=seed, **candidate.study)
    space = ENCODINGS[candidate.encoding](cfg.space)
    return dataclasses.replace(cfg, study=study, space=space)
