"""One worker's study: open it, check the target, run the worker, then the end of the study.

The per-trial loop is `worker.Worker`; this module sets it up (database,
deployer, unit checks, baseline) and ends it (finalists once per study, the
host left on the config the study chose).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import optuna
import structlog

from autotune.config import Config
from autotune.deploy.base import Deployer
from autotune.engines import get_engine
from autotune.errors import AutotuneError, DeployError, HostFailed, ServerFailed, StudyStopped
from autotune.log import get
from autotune.run import address, finalists
from autotune.run.checks import api_key, check_flags, check_unit, levels_above_cap
from autotune.run.deployment import Handover, deploy_trial, deployer_for, handed_over
from autotune.run.server_lock import server_lock
from autotune.run.stopping import StopRequest, TrialInterrupted
from autotune.run.trial import TrialPipeline, TrialResult
from autotune.run.worker import POLL_S, Tally, Worker, confirm_crash
from autotune.search import deployments, workers
from autotune.search import study as st
from autotune.store import storage
from autotune.store.artifacts import artifact_store
from autotune.unit import unitenv

log = get("autotune")


@dataclass
class StudySummary:
    study: str
    finished: int
    ran: int
    deployed: int
    reused: int
    best: dict[str, Any] | None
    budget_spent: bool
    stopped: str | None = None
    predicted: int = 0
    """Configs ruled out by the capacity prediction, without a restart."""
    serving: Handover | None = None
    """What the server was left serving (None: it stopped with autotune)."""


def run_study(
    cfg: Config, *, stop: StopRequest | None = None, deadline: float | None = None
) -> StudySummary:
    """Run this worker's share of the study until the budget is spent, a stop is requested
    or the deadline passes; then the finalists (once per study) and this host's end."""
    stop = stop or StopRequest()
    if cfg.worker is not None:
        structlog.contextvars.bind_contextvars(worker=cfg.worker)
    study = st.open_study(cfg)
    total = cfg.study.n_trials
    if st.remaining_budget(study, total) == 0 and not finalists.pending(cfg, study):
        log.info(
            "budget spent: nothing to deploy",
            study=cfg.study.name,
            finished=st.finished_count(study),
            n_trials=total,
            hint="raise --n-trials to continue this study",
        )
        return _summary(cfg, study, Tally(), spent=True)
    if deadline is not None:
        stop.stop_at(deadline, "deadline reached (--until / --max-hours)")
    try:
        with local_lock(cfg):
            return _run_with_deployer(cfg, study, stop, total, deadline)
    finally:
        stop.cancel()
        storage.remove_lock_file(cfg.study.storage, cfg.study.name)


def local_lock(cfg: Config) -> contextlib.AbstractContextManager[Any]:
    """One worker per server: a systemd host has its own lock (target.systemd.lock_file);
    a local process is guarded by the lock of the address it serves."""
    if cfg.target.deploy != "local-process":
        return contextlib.nullcontext()
    return server_lock(
        cfg.target.base_url,
        f"the server at {cfg.target.base_url} ({cfg.target.unit_file}, config {cfg.source})",
    )


def _run_with_deployer(
    cfg: Config, study: optuna.Study, stop: StopRequest, total: int, deadline: float | None
) -> StudySummary:
    deployer = deployer_for(cfg)
    tally = Tally()
    left: str | None = None
    pipeline: TrialPipeline | None = None
    try:
        deployer.preflight()
        base_unit = deployer.original_unit()
        current = check_unit(cfg, base_unit, check_executables=cfg.target.deploy != "ssh")
        check_flags(cfg, deployer)
        above = levels_above_cap(cfg, base_unit)
        if above is not None:
            log.warning(above)
        baseline = st.baseline_of(cfg.space, current, unitenv.effective(base_unit))
        st.enqueue_baseline_once(study, baseline)
        reached = address.resolve(cfg, deployer, base_unit)
        if reached.tunnel is not None:
            log.info("the benchmark reaches the server " + reached.how)
        pipeline = TrialPipeline(
            cfg,
            deployer,
            get_engine(cfg.target.engine),
            base_unit,
            api_key(cfg),
            stop,
            url=reached.url,
            tunnel=reached.tunnel,
        )
        log.info(
            "study",
            study=cfg.study.name,
            storage=storage.redact(cfg.study.storage),
            finished=st.finished_count(study),
            running=len(workers.running_trials(study)),
            n_trials=total,
            space=f"{cfg.space_source} ({cfg.space.size()} configs)",
        )
        worker = Worker(
            cfg,
            study,
            pipeline.run,
            baseline,
            stop=stop,
            artifacts=artifact_store(cfg.study.storage, st.engine_of(study)),
            on_infra_error=lambda err: wait_for_infrastructure(cfg, deployer, err, stop),
            deadline=deadline,
        )
        try:
            tally = worker.run()
        except KeyboardInterrupt:
            log.warning("aborted: putting a known unit in place without waiting for it")
            abort_to_known_config(cfg, study, deployer, pipeline)
            raise
        except (StudyStopped, HostFailed) as stopped:
            why = stopped.problem if isinstance(stopped, StudyStopped) else stopped.reason
            log.error("study stopped: no config can run", reason=why)
            try:
                finish(cfg, study, deployer, pipeline)
            except AutotuneError as err:
                # The unit itself may be what cannot start: the cause stays the one line.
                log.error("could not put a known config back", error=str(err))
            raise
        if not stop.requested and st.remaining_budget(study, total) == 0:
            _finalists_once(cfg, study, pipeline, stop)
        try:
            left = finish(cfg, study, deployer, pipeline)
        except KeyboardInterrupt:
            log.warning("aborted while finishing: the server is starting the unit just deployed")
            raise
    finally:
        deployer.close()
    summary = _summary(cfg, study, tally, spent=st.remaining_budget(study, total) == 0)
    summary.stopped = stop.reason if stop.requested else None
    if left is not None:
        summary.serving = handed_over(left, pipeline, deployer)
    return summary


def _finalists_once(
    cfg: Config, study: optuna.Study, pipeline: TrialPipeline, stop: StopRequest
) -> None:
    """The finalists are measured by one worker; the others wait for its verdict, so that
    every host ends on the config the study chose."""
    said = False
    while finalists.pending(cfg, study) and not stop.requested:
        if st.claim_finalists(study, cfg.study.n_trials, cfg.worker):
            every = max(1.0, cfg.study.heartbeat_grace / 5)
            with st.holding_finalists_claim(study, cfg.study.n_trials, cfg.worker, every):
                _validate_finalists(cfg, study, pipeline)
            return
        if not said:
            claim = study.user_attrs.get(st.FINALISTS_CLAIM) or {}
            who = (claim.get("owner") or {}).get("worker") or (claim.get("owner") or {}).get("host")
            log.info("another worker measures the finalists: waiting for its verdict", by=who)
            said = True
        time.sleep(POLL_S)


def _validate_finalists(cfg: Config, study: optuna.Study, pipeline: TrialPipeline) -> None:
    try:
        remeasure = confirm_crash(pipeline.run)

        def under_changing_load(params: dict[str, Any] | None) -> TrialResult:
            pipeline.load_phase = True
            try:
                return remeasure(params, lambda _c: None)
            finally:
                pipeline.load_phase = False

        finalists.validate(
            cfg,
            study,
            lambda params: remeasure(params, lambda _c: None),
            under_changing_load=under_changing_load if cfg.benchmark.load_phase else None,
        )
    except TrialInterrupted:
        log.warning("finalist validation interrupted: the best stays the best single measurement")
    except DeployError as err:
        log.error("finalist validation skipped: the target is unreachable", error=str(err))


def wait_for_infrastructure(
    cfg: Config, deployer: Deployer, error: DeployError, stop: StopRequest
) -> None:
    """The host or the link is down: wait with backoff until it answers, or give up."""
    give_up = time.monotonic() + cfg.target.infra_timeout
    delay = 5.0
    log.error("deployment failed: not the config's fault; waiting for the host", error=str(error))
    while True:
        if stop.requested:
            raise error
        if time.monotonic() > give_up:
            raise AutotuneError(
                f"the target has been unreachable for {cfg.target.infra_timeout:.0f} s "
                f"(target.infra_timeout): {error}"
            ) from None
        time.sleep(delay)
        try:
            deployer.preflight()
        except DeployError as again:
            log.warning("target still unreachable", retry_in_s=round(delay), error=str(again))
            delay = min(delay * 2, 120.0)
            continue
        log.info("target reachable again: continuing the study")
        return


def abort_to_known_config(
    cfg: Config, study: optuna.Study, deployer: Deployer, pipeline: TrialPipeline
) -> None:
    """After a second signal: deploy the end-of-study unit, do not wait for it."""
    if cfg.target.deploy == "local-process" or cfg.study.on_finish == "leave":
        return
    try:
        best = st.best_trials(study)
        if cfg.study.on_finish == "apply-best" and best:
            deploy_trial(deployer, pipeline, best[0])
            log.warning("the best config is starting (not waited for)", trial=best[0].number)
        else:
            deployer.restore()
            log.warning("the original unit is starting (not waited for)")
    except (DeployError, KeyboardInterrupt) as exc:
        log.error("could not put a known unit in place", error=str(exc))


def _summary(cfg: Config, study: optuna.Study, tally: Tally, *, spent: bool) -> StudySummary:
    best = st.best_trials(study)
    return StudySummary(
        study=cfg.study.name,
        finished=st.finished_count(study),
        ran=tally.ran,
        deployed=tally.deployed,
        reused=tally.reused,
        predicted=tally.predicted,
        best=describe(study, best[0]) if best else None,
        budget_spent=spent,
    )


def describe(study: optuna.Study, t: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The JSON shape of `autotune best`."""
    metrics = {k: v for k, v in t.user_attrs.items() if k.startswith(("output_tok_s@", "accept"))}
    for key in (
        "max_running_requests",
        "max_total_num_tokens",
        "workload",
        "draft_acceptance",
        "value_ci",
        "uncertain_levels",
    ):
        if key in t.user_attrs:
            metrics[key] = t.user_attrs[key]
    validation = finalists.validation_of(study, t.number)
    if validation is not None:
        metrics["validation"] = validation
    h = deployments.headline(study, t, st.baseline_trial(study))
    if h is not None:
        metrics["over_deployments"] = _over_deployments(h)
    names = study.metric_names or [f"value{i}" for i in range(len(t.values or []))]
    return {
        "study": study.study_name,
        "trial": t.number,
        "params": dict(t.params),
        "resolved": st.trial_config(t),
        "value": t.value if len(t.values or []) == 1 else dict(zip(names, t.values, strict=True)),
        "chosen_by": st.chosen_by(study, t),
        "metrics": metrics,
    }


def _over_deployments(h: deployments.Headline) -> dict[str, Any]:
    """The best's worth over its deployments and its gain, for `best --json`."""
    w = h.worth
    out: dict[str, Any] = {
        "value": round(w.value, 2),
        "low": round(w.low, 2),
        "high": round(w.high, 2),
        "deployments": w.deployments,
        "spread_sd": round(h.spread.sd, 4),
        "spread_from_configs": h.spread.configs,
    }
    if h.gain is not None and h.baseline is not None:
        out["gain"] = {
            "point": round(h.gain.point, 4),
            "low": round(h.gain.low, 4),
            "high": round(h.gain.high, 4),
            "baseline_value": round(h.baseline.value, 2),
            "baseline_deployments": h.baseline.deployments,
        }
    return out


def finish(
    cfg: Config, study: optuna.Study, deployer: Deployer, pipeline: TrialPipeline
) -> str | None:
    """Leave the server on a config someone chose: the best trial's, or the original. What
    it left serving, said as `serving ...` once autotune let go (None: it stops)."""
    action = cfg.study.on_finish
    local = cfg.target.deploy == "local-process"
    if action == "stop":
        log.info("the server stops with autotune (deploy: local-process, study.on_finish: stop)")
        return None
    if action == "leave":
        log.warning("leaving the server as it is (study.on_finish: leave)")
        _keep_serving(deployer, local)
        return "the config the last trial deployed"
    best = st.best_trials(study)
    if action == "apply-best" and best:
        if deploy_trial(deployer, pipeline, best[0], unless_serving=True):
            config = st.trial_config(best[0])
            log.info("deployed the best config", trial=best[0].number, config=config)
        else:
            log.info("the best config is serving already: no restart", trial=best[0].number)
        try:
            pipeline.wait_ready(interruptible=False)
            log.info("serving the best config", trial=best[0].number)
            _keep_serving(deployer, local)
            return f"the best config, trial {best[0].number}'s"
        except ServerFailed as failed:
            log.error(
                "the best config did not come up again; restoring the original",
                reason=failed.reason,
            )
    elif action == "apply-best":
        log.warning("no feasible trial: restoring the original unit")
    deployer.restore()
    try:
        pipeline.wait_ready(interruptible=False)
        log.info("serving the original unit")
        _keep_serving(deployer, local)
        return f"the original {cfg.target.unit}"
    except ServerFailed as failed:
        raise AutotuneError(f"the original unit did not come back up: {failed.reason}") from None


def _keep_serving(deployer: Deployer, local: bool) -> None:
    """A local child process outlives autotune only when asked to: say how to stop it."""
    if local and hasattr(deployer, "keep_running"):
        deployer.keep_running = True
        pid = getattr(deployer, "pid", None)
        log.info("the server keeps serving after autotune exits", pid=pid, stop_with=f"kill {pid}")


__all__ = ["StudySummary", "describe", "finish", "run_study"]
