"""The run loop: one worker's study from the first check to the server it leaves serving.

    summary = loop.run_study(cfg)              # `autotune start`: checks, trials, finalists
    trial.TrialPipeline(cfg, deployer, engine, unit, api_key).run(...)   # deploy, wait, measure
    deployment.apply_trial(cfg, None)          # `autotune apply`: the best config, serving

Modules: `loop` (run_study and the end of a study), `worker` (what a worker does per
trial), `trial` (one trial: deploy, wait until ready, benchmark, score), `finalists`,
`fleet` (several workers), `stopping`, `server_lock`, `checks` (the unit and flags checked
before anything is deployed), `deployment` (deploy a trial's or the original unit outside
a study). A server is never left down: every path ends with a config someone chose.
"""
