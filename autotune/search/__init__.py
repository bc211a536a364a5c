"""The search: the Optuna study, the objective, and what saves deployments.

    study = open_study(cfg)                    # created or resumed, sampler chosen by config
    score = objective.score(cfg.objective, levels, results, max_running_requests)
    capacity.below_floor(cfg, study, config)   # skip a restart whose outcome is known
    pruning / estimate                         # stop a hopeless level early; time left

Modules: `study` (the Optuna study and its records), `objective` (levels to a score),
`constraints` (the dashboard's constraint form), `pruning`, `capacity`, `estimate`,
`gp/` (the Gaussian-process sampler). Nothing here deploys or benchmarks.
"""

from autotune.search.study import open_study

__all__ = ["open_study"]
