"""The search: the Optuna study, the objective, and what saves deployments.

    study = open_study(cfg)                    # created or resumed, sampler chosen by config
    score = objective.score(cfg.objective, levels, results, max_running_requests)
    capacity.below_floor(cfg, study, config)   # skip a restart whose outcome is known
    pruning / estimate                         # stop a hopeless level early; time left

Modules: `study` (the Optuna study and its records), `objective` (levels to a score),
`constraints` (the dashboard's constraint form), `pruning`, `capacity`, `estimate`,
`gp/` (the Gaussian-process sampler). Nothing here deploys or benchmarks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.search.study import open_study

__all__ = ["open_study"]


def __getattr__(name: str) -> Any:
    # Imported when first used: the simulator reads search.perf.acceptance at every start
    # and must not pay for Optuna and the config (0.4 of its 0.56 s of imports).
    if name == "open_study":
        from autotune.search.study import open_study

        return open_study
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
