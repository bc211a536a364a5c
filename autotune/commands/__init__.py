"""Commands that are not the run loop: each module is one `autotune` subcommand's work.

    init.run(where, out_dir, storage=..., force=False)   # `autotune init`: a first config
    validate.validate(cfg)                               # `autotune validate`: checks, no deploy
    export_adaptive.run(cfg, out, measure)               # `autotune export-adaptive`
    dashboard.serve(cfg, ...)                            # `autotune dashboard`
    forget.forget(cfg, [3, 4], kind=None, failed_since=None)  # `autotune forget`
    status.show(cfg, as_json=False)                      # `autotune status`
    best.show(cfg, as_json=False)                        # `autotune best`

`autotune/cli.py` parses arguments and calls these; they call `run/`, `search/`, `store/`,
`export/`.
"""
