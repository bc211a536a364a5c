"""Deploy a trial's config, or the original unit, and wait until it serves.

Used inside a study (its end: `loop.finish`) and outside one (`autotune apply`,
`autotune restore`, `export-adaptive --measure`). A config that does not come up is
replaced by the original unit before the error is raised: the server is never left down.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import optuna

from autotune.config import Config
from autotune.deploy import Deployer, make_deployer
from autotune.engines import get_engine
from autotune.errors import AutotuneError, ServerFailed
from autotune.log import get
from autotune.run import address
from autotune.run.checks import api_key
from autotune.run.locking import server_key
from autotune.run.trial import TrialPipeline
from autotune.search import study as st
from autotune.store import storage
from autotune.store.artifacts import artifact_dir

log = get("autotune")


def deployer_for(cfg: Config) -> Deployer:
    """The deployer of `target.deploy`, with the space's companion files and, for a local
    process, its state folder."""
    t = cfg.target
    return make_deployer(
        t,
        companions=cfg.space.companion_paths(str(t.unit_file.parent)),
        log_dir=state_dir(cfg),
        source=cfg.source,
        port=server_port(cfg.target.base_url),
    )


def server_port(base_url: str) -> int | None:
    """The port of `target.base_url` (80/443 when it names none)."""
    parsed = urlparse(base_url)
    try:
        return parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        return None


def pipeline_for(cfg: Config, deployer: Deployer) -> TrialPipeline:
    unit = deployer.original_unit()
    reached = address.resolve(cfg, deployer, unit)
    return TrialPipeline(
        cfg,
        deployer,
        get_engine(cfg.target.engine),
        unit,
        api_key(cfg),
        url=reached.url,
        tunnel=reached.tunnel,
    )


def unit_of_trial(pipeline: TrialPipeline, t: optuna.trial.FrozenTrial) -> str:
    """The unit text that runs trial `t`'s config (the unit unchanged for an as-is baseline)."""
    config = t.user_attrs.get("config")
    return pipeline.unit_for(dict(config) if config else None)


def deploy_trial(
    deployer: Deployer,
    pipeline: TrialPipeline,
    t: optuna.trial.FrozenTrial,
    *,
    unless_serving: bool = False,
) -> bool:
    """Deploy trial `t`'s config: its unit and its companion files. `unless_serving`: not
    when the server runs exactly that already (the study's last deployment was this config):
    a restart would cost a model load to end where it is. True when it deployed."""
    config = t.user_attrs.get("config")
    params = dict(config) if config else None
    wanted = (pipeline.unit_for(params), pipeline.files_for(params))
    if unless_serving and pipeline.serving == wanted and deployer.is_running():
        return False
    pipeline.serving = None
    deployer.deploy(*wanted)
    pipeline.serving = wanted
    return True


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
    deployer = deployer_for(cfg)
    keep = False
    try:
        deployer.preflight()
        pipeline = pipeline_for(cfg, deployer)
        deploy_trial(deployer, pipeline, trial)
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
    deployer = deployer_for(cfg)
    try:
        deployer.preflight()
        pipeline = pipeline_for(cfg, deployer)
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


def state_dir(cfg: Config) -> Path:
    """A local-process server's logs and pidfile: beside a SQLite study, else beside the
    config; one folder per server (its unit and address) and worker, so that a server left
    by a killed worker is found by the next start, and configs for several servers in one
    folder do not share one."""
    if storage.sqlite_file(cfg.study.storage) is not None:
        base = artifact_dir(cfg.study.storage)
    else:
        base = Path(cfg.source).resolve().parent / "autotune-artifacts"
    name = f"local-process-{cfg.target.unit_file.stem}-{server_key(cfg.target.base_url)}"
    return base / (name if cfg.worker is None else f"{name}-{cfg.worker}")
