"""Deploy a trial's config, or the original unit, and wait until it serves.

Used inside a study (its end: `loop.finish`) and outside one (`autotune apply`,
`autotune restore`, `export-adaptive --measure`). A config that does not come up is
replaced by the original unit before the error is raised: the server is never left down.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import httpx
import optuna

from autotune.config import Config
from autotune.deploy import Deployer, make_deployer
from autotune.engines import get_engine
from autotune.engines._http import auth_headers
from autotune.errors import AutotuneError, ServerFailed
from autotune.log import get
from autotune.run import address
from autotune.run.checks import api_key
from autotune.run.server_lock import server_key
from autotune.run.trial import TrialPipeline
from autotune.search import records
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
    config = t.user_attrs.get(records.CONFIG)
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
    config = t.user_attrs.get(records.CONFIG)
    params = dict(config) if config else None
    wanted = (pipeline.unit_for(params), pipeline.files_for(params))
    if unless_serving and pipeline.serving == wanted and deployer.is_running():
        return False
    pipeline.serving = None
    deployer.deploy(*wanted)
    pipeline.serving = wanted
    return True


def apply_trial(cfg: Config, number: int | None) -> Handover:
    """Deploy a trial's config (default: the best feasible), wait until it serves, and let
    it go."""
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
    pipeline: TrialPipeline | None = None
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
        keep_serving(deployer)
    finally:
        deployer.close()
    return handed_over(f"trial {trial.number}'s config", pipeline, deployer, trial.number)


def restore_original(cfg: Config) -> Handover:
    """Deploy the unit as it was before any study, wait until it serves, and let it go."""
    deployer = deployer_for(cfg)
    pipeline: TrialPipeline | None = None
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
        keep_serving(deployer)
    finally:
        deployer.close()
    return handed_over(f"the original {cfg.target.unit}", pipeline, deployer)


def keep_serving(deployer: Deployer) -> None:
    """A local child process outlives autotune: it was started to serve, not to be measured."""
    if hasattr(deployer, "keep_running"):
        deployer.keep_running = True


@dataclass(frozen=True)
class Handover:
    """What autotune left serving when it let go of the server."""

    what: str
    url: str
    pid: int | None
    """A local child's process id (it outlives autotune); None under systemd."""
    trial: int | None = None

    def sentence(self, cfg: Config) -> str:
        """`serving the original x.service at URL (...)`: the line a person reads last."""
        who = f" on {cfg.worker}" if cfg.worker else ""
        how = f"via {cfg.target.deploy}"
        if self.pid is not None:
            how = f"a local process, pid {self.pid}: `kill {self.pid}` stops it"
        return f"serving {self.what}{who} at {self.url} ({how})"


def handed_over(
    what: str, pipeline: TrialPipeline | None, deployer: Deployer, trial: int | None = None
) -> Handover:
    """Once autotune has let go of the server (`deployer.close()`): it still answers, so that
    no command says a server is serving when nothing does."""
    assert pipeline is not None
    why = still_answers(pipeline)
    if why is not None:
        raise AutotuneError(f"{what} was ready, then stopped answering at {pipeline.url}: {why}")
    # The address a user reaches it at: the configured one, not an SSH link's local end.
    url = pipeline.cfg.target.base_url if pipeline.tunnel is not None else pipeline.url
    pid = getattr(deployer, "pid", None) if getattr(deployer, "keep_running", False) else None
    return Handover(what, url, pid, trial)


def still_answers(pipeline: TrialPipeline) -> str | None:
    """None when the server answers its ready path now; else what the probe met. Through an
    SSH link that closed with autotune, the wait just before stands for it (the unit serves
    by itself under systemd)."""
    if pipeline.tunnel is not None:
        return None
    paths = list(pipeline.engine.ready_paths())
    problem = "no ready path answered"
    with httpx.Client(timeout=5.0, headers=auth_headers(pipeline.api_key)) as client:
        for path in paths:
            try:
                status = client.get(pipeline.url + path).status_code
            except httpx.TransportError as exc:
                return f"{type(exc).__name__} on {path}: {exc}" if str(exc) else type(exc).__name__
            if status == 200:
                return None
            problem = f"HTTP {status} on {path}"
            if status != 404:
                break
    return problem


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
