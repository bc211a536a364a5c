"""The study's one time estimate: what `status`, the report and the worker's log all say.

Deployments left are the budget's trials, but never more than the space's configs no
finished trial holds (a result reused, or a config predicted short of the floor, costs
nothing); each charged what the trials so far cost (`search/estimate.py` says how, kind by
kind); then the finalists' runs and their changing-load phases. A study no worker runs is
paused, not ending.
"""

from __future__ import annotations

import optuna

from autotune.bench.phase import ramp
from autotune.config import Config
from autotune.run import finalists
from autotune.search import estimate
from autotune.search import study as st


def of(cfg: Config, study: optuna.Study, *, live: bool | None = None) -> estimate.Estimate | None:
    if live is None:
        workers = st.liveness(study, cfg)
        live = any(not w.stale for w in workers)
    return estimate.of(
        study,
        cfg.study.n_trials,
        finalist_runs=finalists.expected_runs(cfg, study),
        extra_s=finalists.expected_phase_s(cfg, study),
        configs_left=configs_left(cfg, study),
        live=live,
        bench_bound_s=bench_bound_s(cfg),
    )


def bench_bound_s(cfg: Config) -> float:
    """The longest one deployment's benchmark may take, in wall seconds: every level at
    `max_duration`, measured again when a confidence target is set and missed, then the
    open-loop rates."""
    b = cfg.benchmark
    again = 2 if b.ci_width is not None else 1
    return len(b.concurrency) * b.max_duration * again + len(b.request_rate) * b.rate_duration


def configs_left(cfg: Config, study: optuna.Study) -> int | None:
    """Configs of the space that no finished trial holds; None for a space too large to
    list (every trial then counts as a deployment)."""
    if not cfg.space.enumerable():
        return None
    size = cfg.space.size()
    tried = {
        cfg.space.key(st.trial_config(t))
        for t in study.get_trials(deepcopy=False, states=st.FINISHED)
    }
    return max(0, size - len(tried))


def before_start(cfg: Config) -> str:
    """The estimate before any trial: the benchmark's own time per deployment from the
    config; the model load is the server's and is not known until the first start."""
    b = cfg.benchmark
    size = cfg.space.size() if cfg.space.enumerable() else None
    deployments = min(cfg.study.n_trials, size) if size is not None else cfg.study.n_trials
    runs = b.finalists * min(b.finalist_rounds, 2) if b.finalists else 0
    low = len(b.concurrency) * b.min_duration + len(b.request_rate) * b.rate_duration
    high = len(b.concurrency) * b.max_duration + len(b.request_rate) * b.rate_duration
    phases = b.finalists * len(ramp(b.concurrency)) * b.load_phase_segment if b.load_phase else 0
    total = (deployments + runs) * low + phases
    configs = f" of {size} configs" if size is not None else ""
    return (
        f"up to {deployments} deployments{configs} and about {runs} finalist runs, each a "
        f"model load plus {estimate.duration(low)}-{estimate.duration(high)} of benchmark "
        f"levels: at least {estimate.duration(total)} plus {deployments + runs} model loads; "
        "after the first trial, `autotune status` says it at the measured pace"
    )
