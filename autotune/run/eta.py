"""The study's one time estimate: what `status`, the report and the worker's log all say.

Deployments left are the budget's trials, but never more than the space's configs no
finished trial holds (a result reused, or a config predicted short of the floor, costs
nothing); each charged what the trials so far cost (`search/estimate.py` says how, kind by
kind); then the finalists' runs and their changing-load phases. A study no worker runs is
paused, not ending.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist

import optuna

from autotune.bench.phase import ramp
from autotune.config import Config
from autotune.engines import get_engine
from autotune.errors import ConfigError
from autotune.run import finalists
from autotune.search import estimate, perf, pruning, workers
from autotune.search import study as st
from autotune.unit import unitfile


def of(cfg: Config, study: optuna.Study, *, live: bool | None = None) -> estimate.Estimate | None:
    if live is None:
        live = any(not w.stale for w in workers.liveness(study, cfg))
    return estimate.of(
        study,
        cfg.study.n_trials,
        finalist_runs=finalists.expected_runs(cfg, study),
        extra_s=finalists.expected_phase_s(cfg, study),
        configs_left=configs_left(cfg, study),
        live=live,
        bench_bound_s=bench_bound_s(cfg),
        warmup=pruning.warmup(cfg),
        cut_s=cfg.benchmark.min_duration,
        cut_share=cut_share(cfg, study),
    )


def cut_share(cfg: Config, study: optuna.Study) -> float | None:
    """The share of the space's configs a trial of which would end early, as the
    performance model fitted to the study so far sees the landscape: predicted short of the
    floor (the capacity gate skips it), or predicted so far below the best that a verdict
    with every level measured would stop it (`search/pruning.py`'s test at its narrowest).
    Each config counts its chance under the model's sd. None without a model (pruning off,
    no model for this space, a baseline that drafts nothing): the estimate then takes even
    odds. The sampler steers away from the worst configs, so this share leans high; the
    estimate weighs it as two trials, which the trials seen soon outweigh."""
    if pruning.warmup(cfg) is None:
        return None
    target = st.performance_target(cfg)
    model, _ = perf.build(cfg.space, target, study.get_trials(deepcopy=False))
    if model is None or target is None:
        return None
    predicted = [model.predict(c.params) for c in cfg.space.enumerate() if c.valid]
    shown = [p for p in predicted if p is not None]
    if not shown:
        return None
    floor = target.floor or 0

    def short(p: perf.Prediction) -> bool:
        return p.running is not None and p.running < floor

    reaching = [p.log_value for p in shown if not short(p)]
    if not reaching:
        return 1.0
    n = len(target.scored)
    narrowest = math.sqrt(
        ((n * pruning.START_SD) ** 2 + n * pruning.WINDOW_SD**2) / n**2 + pruning.INCUMBENT_SD**2
    )
    bar = max(reaching) - NormalDist().inv_cdf(1.0 - pruning.PRUNE_BELOW) * narrowest
    chances = [
        1.0 if short(p) else NormalDist().cdf((bar - p.log_value) / max(p.sd, 1e-6)) for p in shown
    ]
    return sum(chances) / len(chances)


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


#: A deployment's warm-ups, drains and restart around its load and windows (measured by
#: experiments/estimate_truth.py: 2.5 s on the demo, 4.8 s on the real llama-server).
OVERHEAD_S = 3.0


@dataclass(frozen=True)
class Night:
    """The study's length before any trial ran."""

    total_s: float
    deployments: int
    finalist_runs: int
    load_s: float | None
    """One model load (None: not known before the first trial)."""
    bench_s: float
    """One deployment's benchmark at its bound."""
    configs: int | None


def night(cfg: Config, unit_text: str | None = None) -> Night:
    """Each deployment the unit's model load (its size at the engine's load rate), warm-ups
    and restart, and the benchmark at its bound, which every drafting config reached on the
    real llama-server; once the pruner may cut, half that benchmark (`search/estimate.py`
    says why); then the finalists' runs and their changing-load phases (a rehearsal's run
    faster)."""
    b = cfg.benchmark
    size = cfg.space.size() if cfg.space.enumerable() else None
    deployments = min(cfg.study.n_trials, size) if size is not None else cfg.study.n_trials
    runs = finalists.runs_expected(cfg)
    runs += 1 if runs else 0  # the unit as it was beside them: nothing tells it is one
    engine = get_engine(cfg.target.engine)
    argv = _argv(cfg, unit_text)
    load = engine.load_seconds(argv) if argv else None
    scale = engine.time_scale(argv) if argv else 1.0
    phases = b.finalists * len(ramp(b.concurrency)) * b.load_phase_segment if b.load_phase else 0
    bound = bench_bound_s(cfg)
    whole = (load or 0.0) + OVERHEAD_S + bound
    # Once the pruner may cut, even odds of a whole trial or one cut at its first window.
    uncut = deployments if (w := pruning.warmup(cfg)) is None else min(deployments, w)
    cut = (whole + (load or 0.0) + OVERHEAD_S + b.min_duration) / 2
    total = uncut * whole + (deployments - uncut) * cut + runs * whole + phases / scale
    return Night(total, deployments, runs, load, bound, size)


def before_start(cfg: Config, unit_text: str | None = None) -> str:
    """`night` in one line: `validate` and `init` print it."""
    n = night(cfg, unit_text)
    configs = f" of {n.configs} configs" if n.configs is not None else ""
    figure = f"about {estimate.duration(n.total_s)}"
    if n.load_s is None:
        each = "a model load (its length unknown until the first trial)"
        figure += f" plus {n.deployments + n.finalist_runs} model loads"
    else:
        each = f"a model load of about {estimate.duration(n.load_s)}"
    return (
        f"{figure}: up to {n.deployments} deployments{configs} and about {n.finalist_runs} "
        f"finalist runs, each {each} and up to {estimate.duration(n.bench_s)} of benchmark "
        "levels; after the first trial, `autotune status` says it at the measured pace"
    )


def _argv(cfg: Config, unit_text: str | None) -> list[str] | None:
    """The unit's command line with `%h` as this user's home (a local unit's model path)."""
    if unit_text is None:
        return None
    try:
        argv = unitfile.parse_exec_start(unit_text, source=str(cfg.target.unit_file)).argv
    except ConfigError:
        return None
    home = str(Path.home())
    return [w.replace("%h", home) for w in argv]
