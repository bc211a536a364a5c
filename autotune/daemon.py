"""The study loop: budget, baseline, propose -> (reuse | run) -> record, and the end of a study."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna

from autotune import finalists, objective, unitfile
from autotune import study as st
from autotune.artifacts import artifact_dir, upload_trial
from autotune.config import Config
from autotune.deploy.base import Deployer
from autotune.engines import get_engine
from autotune.errors import AutotuneError, ConfigError, DeployError, ServerFailed, StudyStopped
from autotune.locking import StudyLock
from autotune.log import get
from autotune.stopping import StopRequest, TrialInterrupted
from autotune.trial import FindMeasured, TrialPipeline, TrialResult

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


def check_unit(
    cfg: Config, unit_text: str, *, check_executables: bool = True
) -> dict[str, str | None]:
    """Parse the base unit and a patched sample; return its current flags. Raises ConfigError."""
    source = str(cfg.target.unit_file)
    current = unitfile.flags(unitfile.parse_exec_start(unit_text, source=source).argv)
    sample = cfg.space.enumerate()[0].params
    patched = cfg.space.patch_unit(unit_text, sample, source=source)
    problems = unitfile.verify_unit(patched, cfg.target.unit, check_executables=check_executables)
    if problems:
        raise ConfigError(source, None, "systemd-analyze verify: " + problems[0])
    return current


def check_flags(cfg: Config, deployer: Deployer, unit_text: str) -> None:
    """Ask the installed server which flags it has, before anything is deployed.

    For every flag of the search space and of the unit: a flag the server's own
    help does not list (or lists as removed) is one ConfigError naming the space
    parameter or the unit. Only where the engine can answer cheaply and the
    deployer can run the program (local-process); elsewhere the first trial
    that hits such a flag stops the study with the same line.
    """
    engine = get_engine(cfg.target.engine)
    args = engine.help_args()
    probe = getattr(deployer, "program_output", None)
    if args is None or probe is None:
        return
    text = probe(args)
    if not text:
        # Not installed here, say: the first trial will say what is wrong, in the server's words.
        log.warning("could not ask the server which flags it has", program_args=args)
        return
    source = str(cfg.target.unit_file)
    in_unit = [f for f in unitfile.parse_exec_start(unit_text, source=source).flags() if f]
    space_flags = {p.flag: name for name, p in cfg.space.params.items()}
    problems = engine.flag_problems(text, [*space_flags, *in_unit])
    for flag, why in problems.items():
        if flag in space_flags:
            key = f"params.{space_flags[flag]}.flag"
            raise ConfigError(cfg.space_source, key, f"{flag}: {why}")
        raise ConfigError(source, "ExecStart", f"{flag}: {why}")


def api_key(cfg: Config) -> str | None:
    if cfg.target.api_key_env is None:
        return None
    key = os.environ.get(cfg.target.api_key_env)
    if not key:
        raise ConfigError(
            cfg.source,
            "target.api_key_env",
            f"environment variable {cfg.target.api_key_env} is not set",
        )
    return key


def run_study(
    cfg: Config, *, stop: StopRequest | None = None, deadline: float | None = None
) -> StudySummary:
    """Run the study until its budget is spent, a stop is requested or the deadline passes."""
    stop = stop or StopRequest()
    with StudyLock(cfg.study.storage, cfg.study.name):
        study = st.open_study(cfg)
        st.recover_stale(study)
        total = cfg.study.n_trials
        if st.remaining_budget(study, total) == 0:
            log.info(
                "budget spent: nothing to deploy",
                study=cfg.study.name,
                finished=st.finished_count(study),
                n_trials=total,
                hint="raise --n-trials to continue this study",
            )
            return _summary(cfg, study, ran=0, deployed=0, reused=0, spent=True)
        if deadline is not None:
            stop.stop_at(deadline, "deadline reached (--until / --max-hours)")
        try:
            return _run_with_deployer(cfg, study, stop, total)
        finally:
            stop.cancel()


def _run_with_deployer(
    cfg: Config, study: optuna.Study, stop: StopRequest, total: int
) -> StudySummary:
    deployer = make_deployer(cfg)
    try:
        deployer.preflight()
        base_unit = deployer.original_unit()
        current = check_unit(cfg, base_unit, check_executables=cfg.target.deploy != "ssh")
        check_flags(cfg, deployer, base_unit)
        baseline = st.baseline_of(cfg.space, current)
        st.enqueue_baseline_once(study, baseline)
        pipeline = TrialPipeline(
            cfg, deployer, get_engine(cfg.target.engine), base_unit, api_key(cfg), stop
        )
        log.info(
            "study",
            study=cfg.study.name,
            storage=cfg.study.storage,
            finished=st.finished_count(study),
            n_trials=total,
            space=f"{cfg.space_source} ({cfg.space.size()} configs)",
        )
        try:
            ran, deployed, reused = run_trials(
                cfg,
                study,
                pipeline.run,
                baseline,
                total,
                stop=stop,
                on_infra_error=lambda err: wait_for_infrastructure(cfg, deployer, err, stop),
            )
        except KeyboardInterrupt:
            log.warning("aborted: putting a known unit in place without waiting for it")
            abort_to_known_config(cfg, study, deployer, pipeline)
            raise
        except StudyStopped as stopped:
            log.error("study stopped: no config can run", reason=stopped.problem)
            try:
                finish(cfg, study, deployer, pipeline)
            except AutotuneError as err:
                # The unit itself may be what cannot start: the cause stays the one line.
                log.error("could not put a known config back", error=str(err))
            raise
        if not stop.requested and st.remaining_budget(study, total) == 0:
            _validate_finalists(cfg, study, pipeline)
        try:
            finish(cfg, study, deployer, pipeline)
        except KeyboardInterrupt:
            log.warning("aborted while finishing: the server is starting the unit just deployed")
            raise
    finally:
        deployer.close()
    summary = _summary(
        cfg,
        study,
        ran=ran,
        deployed=deployed,
        reused=reused,
        spent=st.remaining_budget(study, total) == 0,
    )
    summary.stopped = stop.reason if stop.requested else None
    return summary


def _validate_finalists(cfg: Config, study: optuna.Study, pipeline: TrialPipeline) -> None:
    if not finalists.pending(cfg, study):
        return
    try:
        finalists.validate(cfg, study, lambda params: pipeline.run(params, lambda _c: None))
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
            deployer.deploy(unit_of_trial(pipeline, best[0]))
            log.warning("the best config is starting (not waited for)", trial=best[0].number)
        else:
            deployer.restore()
            log.warning("the original unit is starting (not waited for)")
    except (DeployError, KeyboardInterrupt) as exc:
        log.error("could not put a known unit in place", error=str(exc))


#: Measures one config (None: the unit as it is); the trial pipeline in production,
#: the simulator's model in the sample-efficiency benchmark.
Measure = Callable[[dict[str, Any] | None, FindMeasured], TrialResult]


def run_trials(
    cfg: Config,
    study: optuna.Study,
    measure: Measure,
    baseline: st.Baseline,
    total: int,
    *,
    artifacts: bool = True,
    stop: StopRequest | None = None,
    on_infra_error: Callable[[DeployError], None] | None = None,
) -> tuple[int, int, int]:
    """Propose, measure and record trials until the study holds `total` finished trials.

    A trial cut short by a stop or an infrastructure failure is recorded as
    FAIL (which neither counts against the budget nor teaches the sampler) and
    its config is queued again. Returns (trials run, servers deployed, results reused).
    """
    stop = stop or StopRequest()
    ran = deployed = reused = 0
    while st.remaining_budget(study, total) > 0 and not stop.requested:
        number = st.finished_count(study) + 1
        try:
            outcome = one_trial(cfg, study, measure, baseline, number, total, artifacts=artifacts)
        except DeployError as err:
            if on_infra_error is None:
                raise
            on_infra_error(err)
            continue
        if outcome == "interrupted":
            break
        ran += 1
        deployed += outcome != "reused-before-deploy"
        reused += outcome.startswith("reused")
    return ran, deployed, reused


def one_trial(
    cfg: Config,
    study: optuna.Study,
    measure: Measure,
    baseline: st.Baseline,
    number: int,
    total: int,
    *,
    artifacts: bool = True,
) -> str:
    as_is = st.baseline_as_is_pending(study, baseline)
    trial = study.ask()
    trial.set_user_attr("owner", st.owner())
    trial.set_user_attr("started_at", time.time())
    if as_is:
        params = None
        trial.set_user_attr("baseline", True)
    else:
        params = cfg.space.decode(cfg.space.suggest(trial))
        trial.set_user_attr("config", params)
    is_baseline = bool(trial.user_attrs.get("baseline"))
    log.info(
        f"trial {number}/{total}",
        trial=trial.number,
        config=params if params is not None else "unit file as is",
        **({"baseline": True} if is_baseline else {}),
    )
    if params is not None:
        earlier = st.find_measured(study, params)
        if earlier is not None:
            frozen = st.record_reuse(study, trial, earlier)
            log.info(
                "same config as an earlier trial: result reused",
                trial=trial.number,
                reused_from=earlier,
                value=_fmt(frozen.values),
            )
            return "reused-before-deploy"
    try:
        with st.Heartbeat(study, trial):
            result = measure(params, lambda cfg_: st.find_measured(study, cfg_))
    except TrialInterrupted as stopped:
        st.fail_and_requeue(study, trial, failure="interrupted", reason=str(stopped))
        log.warning(
            "trial interrupted: not recorded, its config is queued again", trial=trial.number
        )
        return "interrupted"
    except DeployError as err:
        # Not the config's fault: the trial must not teach the sampler anything.
        st.fail_and_requeue(study, trial, failure="infrastructure", reason=str(err))
        raise
    except KeyboardInterrupt:
        st.fail_and_requeue(study, trial, failure="interrupted", reason="aborted")
        raise
    except StudyStopped as stopped:
        # No config can avoid it: the study ends with one line; the config runs once fixed.
        st.fail_and_requeue(study, trial, failure="study_stopped", reason=str(stopped))
        raise
    except Exception as exc:
        st.fail_and_requeue(study, trial, failure="internal_error", reason=repr(exc))
        raise
    if result.reused_from is not None:
        result.attrs.pop("feasible", None)
        for key, value in result.attrs.items():
            trial.set_user_attr(key, value)
        frozen = st.record_reuse(study, trial, result.reused_from)
        log.info(
            "server resolved it to an earlier trial's config: result reused",
            trial=trial.number,
            reused_from=result.reused_from,
        )
        return "reused-after-deploy"
    if artifacts:
        upload_trial(
            cfg.study.storage,
            trial,
            unit_text=result.unit_text,
            server_log=result.server_log,
            result={"config": params, **result.attrs},
        )
    frozen = st.record(study, trial, result.score, result.attrs)
    st.update_model_best(study, cfg.space)
    log.info(
        "trial done",
        trial=trial.number,
        value=_fmt(frozen.values),
        feasible=result.score.feasible,
        **({"failure": result.attrs["failure"]} if "failure" in result.attrs else {}),
    )
    return "measured"


def _fmt(values: list[float] | None) -> str:
    return ", ".join(f"{v:.1f}" for v in values or [])


def _summary(
    cfg: Config, study: optuna.Study, *, ran: int, deployed: int, reused: int, spent: bool
) -> StudySummary:
    best = st.best_trials(study)
    return StudySummary(
        study=cfg.study.name,
        finished=st.finished_count(study),
        ran=ran,
        deployed=deployed,
        reused=reused,
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


def make_deployer(cfg: Config) -> Deployer:
    t = cfg.target
    if t.deploy == "local-process":
        from autotune.deploy.local_process import LocalProcessDeployer

        # Logs and the pidfile persist beside the study, so a server left by a killed
        # daemon is found and stopped by the next start.
        state = artifact_dir(cfg.study.storage) / "local-process"
        return LocalProcessDeployer(t.unit_file, log_dir=state)
    from autotune.deploy import settings

    sd = settings.systemd_settings(t.unit, str(t.unit_file), t.systemd, cfg.source)
    gw = settings.gpu_wait_settings(t.gpu_wait, cfg.source)
    if t.deploy == "ssh":
        from autotune.deploy.ssh import ssh_deployer

        return ssh_deployer(settings.ssh_settings(t.ssh, cfg.source), sd, gw)
    from autotune.deploy.local_systemd import local_systemd_deployer

    return local_systemd_deployer(sd, gw)


def unit_of_trial(pipeline: TrialPipeline, t: optuna.trial.FrozenTrial) -> str:
    """The unit text that runs trial `t`'s config (the unit unchanged for an as-is baseline)."""
    config = t.user_attrs.get("config")
    return pipeline.unit_for(dict(config) if config else None)


def finish(cfg: Config, study: optuna.Study, deployer: Deployer, pipeline: TrialPipeline) -> None:
    """Leave the server on a config someone chose: the best trial's, or the original."""
    action = cfg.study.on_finish
    local = cfg.target.deploy == "local-process"
    if action == "stop":
        log.info("the server stops with autotune (deploy: local-process, study.on_finish: stop)")
        return
    if action == "leave":
        log.warning("leaving the server as it is (study.on_finish: leave)")
        _keep_serving(deployer, local)
        return
    best = st.best_trials(study)
    if action == "apply-best" and best:
        log.info("deploying the best config", trial=best[0].number, config=st.trial_config(best[0]))
        deployer.deploy(unit_of_trial(pipeline, best[0]))
        try:
            pipeline.wait_ready(interruptible=False)
            log.info("serving the best config", trial=best[0].number)
            _keep_serving(deployer, local)
            return
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
    except ServerFailed as failed:
        raise AutotuneError(f"the original unit did not come back up: {failed.reason}") from None


def _keep_serving(deployer: Deployer, local: bool) -> None:
    """A local child process outlives autotune only when asked to: say how to stop it."""
    if local and hasattr(deployer, "keep_running"):
        deployer.keep_running = True
        pid = getattr(deployer, "pid", None)
        log.info("the server keeps serving after autotune exits", pid=pid, stop_with=f"kill {pid}")


__all__ = ["AutotuneError", "StudySummary", "objective", "run_study"]


def check_target(cfg: Config) -> None:
    """`autotune validate` for a systemd target: reach it, read the unit, change nothing."""
    deployer = make_deployer(cfg)
    try:
        deployer.preflight()
        current = getattr(deployer, "current_unit", None)
        if current is not None:
            text = current()
            check_unit(cfg, text, check_executables=False)
    finally:
        deployer.close()


def _pipeline_for(cfg: Config, deployer: Deployer) -> TrialPipeline:
    return TrialPipeline(
        cfg, deployer, get_engine(cfg.target.engine), deployer.original_unit(), api_key(cfg)
    )


def apply_trial(cfg: Config, number: int | None) -> int:
    """Deploy a trial's config (default: the best feasible) and wait until it serves."""
    study = st.open_study(cfg, create=False)
    if number is None:
        best = st.best_trials(study)
        if not best:
            raise AutotuneError(f"study {cfg.study.name!r} has no feasible trial to apply")
        trial = best[0]
    else:
        matches = [t for t in study.get_trials(deepcopy=False) if t.number == number]
        if not matches or matches[0].state != optuna.trial.TrialState.COMPLETE:
            raise AutotuneError(f"study {cfg.study.name!r} has no finished trial {number}")
        trial = matches[0]
    deployer = make_deployer(cfg)
    keep = False
    try:
        deployer.preflight()
        pipeline = _pipeline_for(cfg, deployer)
        deployer.deploy(unit_of_trial(pipeline, trial))
        try:
            pipeline.wait_ready(interruptible=False)
        except ServerFailed as failed:
            log.error("the config did not come up; restoring the original", reason=failed.reason)
            deployer.restore()
            pipeline.wait_ready(interruptible=False)
            raise AutotuneError(f"trial {trial.number} did not come up: {failed.reason}") from None
        keep = True
    finally:
        if keep and hasattr(deployer, "keep_running"):
            deployer.keep_running = True  # a local child keeps serving after autotune exits
        deployer.close()
    return trial.number


def restore_original(cfg: Config) -> None:
    deployer = make_deployer(cfg)
    try:
        deployer.preflight()
        pipeline = _pipeline_for(cfg, deployer)
        deployer.restore()
        try:
            pipeline.wait_ready(interruptible=False)
        except ServerFailed as failed:
            raise AutotuneError(f"the original unit did not come up: {failed.reason}") from None
        forget = getattr(deployer, "forget_original", None)
        if forget is not None:
            forget()  # the next study backs up the unit as it is now
    finally:
        deployer.close()
