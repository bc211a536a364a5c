"""Does the study's winner hold on this host? `autotune apply --check`.

A fleet's next host (a worker the study has not run on, or one rebuilt) should not cost a
study: deploy the winner, measure every level once, and compare its value with what the
host that measured it saw. Each figure is one start of the server, so the two agree when
their difference is within both windows' intervals and two starts' spread
(`pruning.START_SD`, about 2 % each). Inside that, the host is done and serves the winner;
outside it, in either direction, it is not the world the study measured: it keeps serving
the winner (the best known) and the sentence says how to tune it from the study
(`start --from`, which reads the study as evidence, not as truth).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import optuna

from autotune.config import Config
from autotune.errors import AutotuneError
from autotune.log import get
from autotune.run import deployment
from autotune.search import objective, pruning, records
from autotune.search import study as st

log = get("autotune")

#: Exit code of `apply --check` when the winner does not hold on the host (it is serving).
DOES_NOT_HOLD = 3


@dataclass(frozen=True)
class Check:
    """The winner's value where the study measured it and here, and whether they agree."""

    trial: int
    metric: str
    earlier: float
    earlier_host: str | None
    """The worker that measured it (None: the study did not say)."""
    here: float | None
    """None: the config did not come up here, or missed a constraint."""
    margin: float
    """Relative difference within which the two agree (95 %)."""
    why_not: str | None = None

    @property
    def holds(self) -> bool:
        return self.here is not None and abs(self.here / self.earlier - 1.0) <= self.margin

    def sentence(self, cfg: Config) -> str:
        where = f"on {self.earlier_host}" if self.earlier_host else "by the study"
        who = cfg.worker or "this host"
        if self.here is None:
            head = f"{who}: trial {self.trial}'s config does not hold here: {self.why_not}"
        else:
            diff = self.here / self.earlier - 1.0
            verdict = "holds here" if self.holds else "does not hold here"
            head = (
                f"{who}: trial {self.trial}'s config {verdict}: {self.metric} {self.here:.1f} "
                f"against {self.earlier:.1f} measured {where} ({100 * diff:+.1f} %; one start "
                f"each agrees within ±{100 * self.margin:.1f} %)"
            )
        if self.holds:
            return head
        return (
            f"{head}. To tune {who} from the study: autotune start"
            f"{f' --worker {cfg.worker}' if cfg.worker else ''} --study "
            f"{cfg.study.name}-{cfg.worker or 'here'} --from {cfg.study.name}"
        )


def check_trial(cfg: Config, number: int | None) -> tuple[deployment.Handover, Check]:
    """Deploy trial `number`'s config (default: the declared best), measure it once, and
    leave it serving; the original unit if it does not come up. Records the check on the
    study (`records.STUDY_HOST_CHECKS`, by worker)."""
    study = st.open_study(cfg, create=False)
    trial = _winner(cfg, study, number)
    config = trial.user_attrs.get(records.CONFIG)
    params = dict(config) if config else None
    deployer = deployment.deployer_for(cfg)
    pipeline = None
    try:
        deployer.preflight()
        pipeline = deployment.pipeline_for(cfg, deployer)
        log.info("measuring the study's winner on this host", trial=trial.number, config=params)
        result = pipeline.run(params, lambda _c: None)
        check = _compare(cfg, trial, result.score.values, result.attrs, result.score.feasible)
        if check.here is None:
            # Down, or up but short of a constraint the operator set: not what to leave.
            log.error("the winner does not run here as the study asks; restoring the original")
            deployer.restore()
            pipeline.wait_ready(interruptible=False)
        deployment.keep_serving(deployer)
    finally:
        deployer.close()
    _record(study, cfg, check)
    if check.here is None:
        return deployment.handed_over(f"the original {cfg.target.unit}", pipeline, deployer), check
    what = f"trial {trial.number}'s config"
    return deployment.handed_over(what, pipeline, deployer, trial.number), check


def _winner(cfg: Config, study: optuna.Study, number: int | None) -> optuna.trial.FrozenTrial:
    if len(study.directions) != 1:
        raise AutotuneError(
            f"study {cfg.study.name!r} is a Pareto study: apply --check compares one value"
        )
    if number is None:
        best = st.best_trials(study)
        if not best:
            raise AutotuneError(f"study {cfg.study.name!r} has no feasible trial to check")
        return best[0]
    done = optuna.trial.TrialState.COMPLETE
    matches = [t for t in study.get_trials(deepcopy=False) if t.number == number]
    if not matches or matches[0].state != done or not matches[0].values:
        raise AutotuneError(f"study {cfg.study.name!r} has no finished trial {number}")
    return matches[0]


def _compare(
    cfg: Config,
    trial: optuna.trial.FrozenTrial,
    values: list[float],
    attrs: Mapping[str, Any],
    feasible: bool,
) -> Check:
    owner = trial.user_attrs.get(records.OWNER) or {}
    earlier_host = owner.get("worker") if isinstance(owner, dict) else None
    earlier_ci = trial.user_attrs.get(records.VALUE_CI)
    here_ci = attrs.get(records.VALUE_CI)
    margin = pruning.agreement(_number(earlier_ci), _number(here_ci))
    metric = objective.metric_names(cfg.objective, cfg.benchmark.concurrency)[0]
    base = {"trial": trial.number, "metric": metric, "earlier": float(trial.values[0]),
            "earlier_host": earlier_host, "margin": margin}  # fmt: skip
    failure = attrs.get(records.FAILURE)
    if failure or not values or values[0] <= 0:
        reason = attrs.get(records.REASON) or failure or "nothing was measured"
        return Check(**base, here=None, why_not=f"it did not run: {reason}")
    if not feasible:
        missed = attrs.get(records.REASON) or "a constraint of the objective"
        return Check(**base, here=None, why_not=f"it ran at {values[0]:.1f} but missed {missed}")
    return Check(**base, here=float(values[0]))


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and x > 0 else None


def _record(study: optuna.Study, cfg: Config, check: Check) -> None:
    checks = dict(study.user_attrs.get(records.STUDY_HOST_CHECKS) or {})
    checks[cfg.worker or "-"] = {**asdict(check), "holds": check.holds, "at": time.time()}
    study.set_user_attr(records.STUDY_HOST_CHECKS, checks)
