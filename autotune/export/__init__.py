"""Configs built from a finished study that are not points of its space, and what they did.

    sglang_adaptive.export(cfg, out)   # SGLang's adaptive config: each load's static winner
    vllm_schedule.export(cfg, out)     # vLLM's per-batch-size draft length (a JSON flag)
    probes.measure(cfg, study, ...)    # deploy them once each, recorded as probes
    phases.phases(study, probes)       # the changing-load phase of the best and the probes

`probes.py` is what both exporters share: write the file, record it on the study, and
measure it as a probe (recorded in the study's `adaptive_probes`, never an Optuna trial).
The subcommand is `commands/export_adaptive.py`; the report reads the comparisons.
"""
