"""`autotune export-adaptive`: the study's per-load winners as one config the engine switches
by batch size, written, and with `--measure` deployed and compared with the static winners.

SGLang's spaces get its adaptive config (`export/sglang_adaptive.py`); a space that tunes
the draft length inside a JSON flag gets vLLM's per-batch-size schedule
(`export/vllm_schedule.py`).
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna

from autotune.config import Config
from autotune.export import phases, sglang_adaptive, vllm_schedule
from autotune.search import records
from autotune.search import study as st


def run(cfg: Config, out: Path | None, measure: bool) -> int:
    """Export (and measure); prints what a person reads. Exit status 0."""
    if vllm_schedule.applies(cfg.space):
        return _schedule(cfg, out, measure)
    path, data, winners = sglang_adaptive.export(cfg, out)
    for w in winners:
        print(f"c={w.concurrency:<4} best chain: steps {w.steps} ({w.tok_s:.1f} tok/s, "
              f"trial {w.trial})")  # fmt: skip
    print(f"wrote {path}: {json.dumps(data)}")
    if measure:
        sglang_adaptive.measure(cfg, data)
        study = st.open_study(cfg, create=False)
        print(sglang_adaptive.table(sglang_adaptive.comparison(cfg, study)))
        _phases(study)
    return 0


def _schedule(cfg: Config, out: Path | None, measure: bool) -> int:
    path, data, winners = vllm_schedule.export(cfg, out)
    for w in winners:
        what = f"{w.tokens} draft tokens" if w.tokens else "no speculation"
        print(f"c={w.concurrency:<4} best: {what} ({w.tok_s:.1f} tok/s, trial {w.trial})")
    print(f"wrote {path}: --speculative-config '{json.dumps(data)}'")
    if measure:
        vllm_schedule.measure(cfg, data)
        study = st.open_study(cfg, create=False)
        print(vllm_schedule.comparison(cfg, study))
        _phases(study)
    return 0


def _phases(study: optuna.Study) -> None:
    probes = study.user_attrs.get(records.STUDY_ADAPTIVE_PROBES) or {}
    print(phases.table(phases.phases(study, probes)))
