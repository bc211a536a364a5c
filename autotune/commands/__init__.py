"""Commands that are not the run loop: each module is one `autotune` subcommand's work.

    init.run(where, out_dir, storage=..., force=False)   # `autotune init`: a first config
    validate.validate(cfg)                               # `autotune validate`: checks, no deploy
    export_adaptive.export(cfg, ...)                     # `autotune export-adaptive`
    dashboard.serve(cfg, ...)                            # `autotune dashboard`

`autotune/cli.py` parses arguments and calls these; they call `run/`, `search/`, `store/`.
"""
