"""What a worker does: propose a config, measure it on its host, record it, until the budget ends.

A study may have several workers, one per host, each an `autotune start`
(or one of the processes a `workers:` config starts). They share nothing but
the study's database: a proposal is made under the study's proposal lock
(`study.propose`), so the total never passes `n_trials` and the sampler sees
every config being measured; a worker whose host or process dies has its
running trial failed and its config queued again by whichever worker proposes
next. Per trial, `Worker.trial` is the whole story:

    proposal -> measured already?   -> reuse that result (nothing deployed)
             -> being measured now? -> wait for it, then reuse it
             -> measure (deploy, benchmark) with a heartbeat -> store files -> record

A trial cut short by a stop or a failure that is not the config's fault
(SSH, the database) is recorded FAIL and its config queued again: it neither
counts against the budget nor teaches the sampler anything.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import optuna
from optuna.trial import TrialState

from autotune import log as alog
from autotune.config import Config
from autotune.errors import DeployError, HostFailed, StudyStopped, UnitDoesNotServe
from autotune.log import get
from autotune.run.stopping import StopRequest, TrialInterrupted
from autotune.run.trial import FindMeasured, TrialResult
from autotune.search import capacity, pruning, records, workers
from autotune.search import study as st
from autotune.search.pruning import LevelPlan
from autotune.space import Params
from autotune.store import optuna_private
from autotune.store.artifacts import upload_trial
from autotune.store.optuna_private import ArtifactStore
from autotune.store.storage import DATABASE_ERRORS, wait_for_database
from autotune.unit import secrets

log = get("autotune")


class Measure(Protocol):
    """Measures one config (None: the unit as it is); the trial pipeline in production,
    the simulator's model in the sample-efficiency benchmark. `plan` orders the levels and
    may stop the trial early (None: every level, in the configured order)."""

    def __call__(
        self,
        params: dict[str, Any] | None,
        find_measured: FindMeasured,
        plan: LevelPlan | None = None,
    ) -> TrialResult: ...


#: How often a worker with nothing to propose looks again (others' trials are running).
POLL_S = 2.0

T = TypeVar("T")


class Outcome(enum.Enum):
    """What happened to one proposal (`Worker.trial`)."""

    MEASURED = "measured"
    """Deployed and benchmarked (or failed while trying): a result of its own."""
    REUSED_BEFORE_DEPLOY = "reused-before-deploy"
    """The same config was measured before: its result, no deploy."""
    REUSED_WHILE_RUNNING = "reused-while-running"
    """Another worker was measuring it: waited for its result."""
    REUSED_AFTER_DEPLOY = "reused-after-deploy"
    """Deployed, and the server resolved it to an earlier trial's config."""
    PREDICTED_INFEASIBLE = "predicted-infeasible"
    """The capacity prediction ruled it out: recorded, never deployed."""
    INTERRUPTED = "interrupted"
    """A stop request ended it: not recorded, queued again."""

    @property
    def reused(self) -> bool:
        return self in (
            Outcome.REUSED_BEFORE_DEPLOY,
            Outcome.REUSED_WHILE_RUNNING,
            Outcome.REUSED_AFTER_DEPLOY,
        )

    @property
    def deployed(self) -> bool:
        return self in (Outcome.MEASURED, Outcome.REUSED_AFTER_DEPLOY)


@dataclass
class Tally:
    ran: int = 0
    deployed: int = 0
    reused: int = 0
    predicted: int = 0
    """Configs recorded infeasible by the capacity prediction, never deployed."""

    def add(self, outcome: Outcome) -> None:
        self.ran += 1
        self.deployed += outcome.deployed
        self.reused += outcome.reused
        self.predicted += outcome is Outcome.PREDICTED_INFEASIBLE


class Worker:
    def __init__(
        self,
        cfg: Config,
        study: optuna.Study,
        measure: Measure,
        baseline: st.Baseline,
        *,
        stop: StopRequest | None = None,
        artifacts: ArtifactStore | None = None,
        on_infra_error: Callable[[DeployError], None] | None = None,
        deadline: float | None = None,
    ) -> None:
        self.deadline = deadline
        self.cfg = cfg
        self.study = study
        self.measure = measure
        self.baseline = baseline
        self.stop = stop or StopRequest()
        self.artifacts = artifacts
        self.on_infra_error = on_infra_error
        self.name = cfg.worker

    # -- the loop ---------------------------------------------------------------------
    def run(self) -> Tally:
        """Trials until the study holds n_trials finished ones (or a stop is requested)."""
        tally = Tally()
        waiting_said = False
        while not self.stop.requested:
            proposal = self.db(self.propose)
            if proposal is None:
                if self.db(lambda: st.remaining_budget(self.study, self.cfg.study.n_trials)) == 0:
                    break
                if not waiting_said:
                    log.info("the rest of the budget is being measured by other workers: waiting")
                    waiting_said = True
                time.sleep(POLL_S)  # one of them may fail and free its place
                continue
            waiting_said = False
            try:
                outcome = self.trial(proposal)
            except DeployError as err:
                if self.on_infra_error is None:
                    raise
                self.on_infra_error(err)
                continue
            if outcome is Outcome.INTERRUPTED:
                break
            tally.add(outcome)
            if outcome is Outcome.MEASURED:
                self.db(self.say_estimate)
        return tally

    def say_estimate(self) -> None:
        """After each measured trial: how long the rest will take, at the pace so far (not
        computed where no one would read it: it predicts every config of the space)."""
        from autotune.run import eta
        from autotune.search import estimate

        if not logging.getLogger("autotune").isEnabledFor(logging.INFO):
            return

        e = eta.of(self.cfg, self.study, live=True)
        if e is None or (e.remaining == 0 and not e.finalist_runs):
            return
        fits = e.fits(self.deadline)
        extra = {}
        if fits is not None:
            extra["before_deadline"] = f"about {fits} of {e.remaining} deployments"
        log.info("time left: " + estimate.sentence(e), left_s=round(e.left_s), **extra)
        alog.progress(left=f"about {estimate.duration(e.left_s)} left")

    def propose(self) -> st.Proposal | None:
        return st.propose(self.study, self.cfg, self.baseline, worker=self.name)

    # -- one trial ----------------------------------------------------------------------
    def trial(self, p: st.Proposal) -> Outcome:
        """From a proposal to a result in the study; returns what happened to it."""
        self._announce(p)
        if p.params is not None:
            answered = self._answered_without_deploying(p.trial, p.params)
            if answered is not None:
                return answered
        result = self._measured(p.trial, p.params)
        if result is None:
            return Outcome.INTERRUPTED
        if p.baseline:
            self._baseline_served(p.trial, result)
        if result.reused_from is not None:
            return self._reused_after_deploy(p.trial, result, result.reused_from)
        return self._recorded(p.trial, p.params, result)

    def _announce(self, p: st.Proposal) -> None:
        trial, params = p.trial, p.params
        log.info(
            f"trial {p.position} of {self.cfg.study.n_trials}",
            trial=trial.number,
            config=params if params is not None else "unit file as is",
            **({"baseline": True} if p.baseline else {}),
        )
        shown = " ".join(f"{k.removeprefix('speculative_')}={v}" for k, v in (params or {}).items())
        alog.progress(
            trial=f"trial {p.position} of {self.cfg.study.n_trials} (study trial #{trial.number})",
            config=shown or "the unit as is",
            level=None,
            tok_s=None,
        )

    def _answered_without_deploying(self, trial: optuna.Trial, params: Params) -> Outcome | None:
        """A config measured (or being measured) under another trial, or one predicted short
        of the floor: recorded without a deployment. None: deploy it."""
        earlier = self.db(lambda: self._measured_or_measuring(params, trial.number))
        if earlier is not None:
            frozen = self.db(lambda: st.record_reuse(self.study, trial, earlier[0]))
            log.info(
                "same config as an earlier trial: result reused",
                trial=trial.number,
                reused_from=earlier[0],
                value=_fmt(frozen.values),
            )
            return earlier[1]
        predicted = self.db(lambda: capacity.below_floor(self.cfg, self.study, params))
        if predicted is not None:
            return self._record_predicted(trial, params, predicted)
        return None

    def _measured(self, trial: optuna.Trial, params: Params | None) -> TrialResult | None:
        """The config deployed and measured (None: interrupted, its config queued again).
        Whatever else stops it marks the trial failed with its kind, then propagates."""
        try:
            plan = self.db(lambda: pruning.plan(self.cfg, self.study, params))
            alive = workers.heartbeat(self.study, trial)
            shown = workers.progress_record(trial, alog.progress_text)
            with alive, shown:
                return confirm_crash(self.measure)(
                    params, lambda c: st.find_measured(self.study, c), plan
                )
        except TrialInterrupted as stopped:
            self._fail(trial, "interrupted", str(stopped))
            log.warning(
                "trial interrupted: not recorded, its config is queued again", trial=trial.number
            )
            return None
        except DeployError as err:
            self._fail(trial, "infrastructure", str(err))
            raise
        except KeyboardInterrupt:
            self._fail(trial, "interrupted", "aborted")
            raise
        except StudyStopped as stopped:
            # No config can avoid it: the study ends with one line; the config runs once fixed.
            self._fail(trial, "study_stopped", str(stopped))
            raise
        except HostFailed as host:
            # The host's, not the config's: given back, run again once the host is fixed.
            self._fail(trial, "host_failure", f"{host.kind}: {host.reason}")
            raise
        except Exception as exc:
            self._fail(trial, "internal_error", repr(exc))
            raise

    def _reused_after_deploy(
        self, trial: optuna.Trial, result: TrialResult, source: int
    ) -> Outcome:
        """The server resolved the config to one an earlier trial measured."""
        result.attrs.pop("feasible", None)
        for key, value in result.attrs.items():
            self.db(lambda k=key, v=value: trial.set_user_attr(k, v))
        self.db(lambda: st.record_reuse(self.study, trial, source))
        log.info(
            "server resolved it to an earlier trial's config: result reused",
            trial=trial.number,
            reused_from=source,
        )
        return Outcome.REUSED_AFTER_DEPLOY

    def _recorded(self, trial: optuna.Trial, params: Params | None, result: TrialResult) -> Outcome:
        """The result in the study and its artifacts; the model's best updated."""
        upload_trial(
            self.artifacts,
            trial,
            unit_text=result.unit_text,
            server_log=result.server_log,
            result={records.CONFIG: params, **result.attrs},
        )
        frozen = self.db(lambda: self._record(trial, result))
        if frozen is None:
            return Outcome.MEASURED
        target = st.performance_target(self.cfg)
        self.db(lambda: st.update_model_best(self.study, self.cfg.space, target))
        if result.pruned:
            verdict = result.attrs.get(pruning.PRUNED) or {}
            log.info(
                "trial pruned",
                trial=trial.number,
                after_levels=verdict.get("after_levels"),
                estimate=verdict.get("estimate"),
            )
            return Outcome.MEASURED
        log.info(
            "trial done",
            trial=trial.number,
            value=_fmt(frozen.values),
            feasible=result.score.feasible,
            **({"failure": failure} if (failure := result.attrs.get(records.FAILURE)) else {}),
        )
        return Outcome.MEASURED

    def _baseline_served(self, trial: optuna.Trial, result: TrialResult) -> None:
        """The unit as it is must serve before any config is worth deploying: a baseline that
        does not is given back (not recorded infeasible) and the study stops with its reason."""
        kind = result.attrs.get(records.FAILURE)
        if kind is None or kind in SERVED_FAILURES:
            return
        reason = f"{kind}: {result.attrs.get(records.REASON, '')}"
        upload_trial(
            self.artifacts,
            trial,
            unit_text=result.unit_text,
            server_log=result.server_log,
            result={records.CONFIG: None, **result.attrs},
        )
        self._fail(trial, "unit_does_not_serve", reason)
        started = kind not in DID_NOT_START
        raise UnitDoesNotServe(
            str(self.cfg.target.unit_file),
            None,
            (
                "your unit as it is does not serve the benchmark: "
                if started
                else "your unit does not start as it is: "
            )
            + reason
            + "; fix the unit (its server log is in the trial's files), then autotune start",
        )

    def _record_predicted(
        self, trial: optuna.Trial, params: dict[str, Any], predicted: capacity.Prediction
    ) -> Outcome:
        """A config the trials so far show to fall short of the running-requests floor:
        recorded infeasible with the prediction, and no server restarted for it."""
        floor = self.cfg.objective.constraints.min_running_requests
        assert floor is not None
        attrs = {records.CONFIG: params, **predicted.attrs(floor)}
        self.db(lambda: st.record(self.study, trial, capacity.score(self.cfg, predicted), attrs))
        log.info(
            "predicted infeasible: not deployed",
            trial=trial.number,
            max_running_requests=attrs[records.PREDICTED_MAX_RUNNING_REQUESTS],
            interval=attrs[records.PREDICTED_INTERVAL],
            required=floor,
        )
        return Outcome.PREDICTED_INFEASIBLE

    def _measured_or_measuring(
        self, params: dict[str, Any], mine: int
    ) -> tuple[int, Outcome] | None:
        """An earlier result for this config: finished, or (after waiting) another worker's.

        The GP never proposes a config being measured; TPE and random can. Waiting
        for the other worker's result costs this host the rest of that trial,
        where deploying the same config twice would cost a whole trial and count it twice.
        """
        earlier = st.find_measured(self.study, params)
        if earlier is not None:
            return earlier, Outcome.REUSED_BEFORE_DEPLOY
        other = st.being_measured(self.study, params, mine)
        if other is None:
            return None
        log.info("the same config is being measured by another worker: waiting for it", trial=other)
        while not self.stop.requested:
            if st.state_of(self.study, other) != TrialState.RUNNING:
                break
            time.sleep(POLL_S)
        earlier = st.find_measured(self.study, params)
        return (earlier, Outcome.REUSED_WHILE_RUNNING) if earlier is not None else None

    def _record(self, trial: optuna.Trial, result: TrialResult) -> optuna.trial.FrozenTrial | None:
        """Record the measurement; None if another worker already failed this trial."""
        current = optuna_private.storage(self.study).get_trial(optuna_private.trial_id(trial))
        if current.state != TrialState.RUNNING:
            if current.state == TrialState.COMPLETE:
                return current  # recorded before the database dropped our answer
            log.error(
                "this trial was failed by another worker while the database was away; "
                "its config was queued again and will be measured once more",
                trial=trial.number,
            )
            return None
        if result.pruned:
            return st.record_pruned(self.study, trial, result.score, result.attrs)
        return st.record(self.study, trial, result.score, result.attrs)

    def _fail(self, trial: optuna.Trial, failure: str, reason: str) -> None:
        reason = secrets.text(reason)  # a server's log tail may quote its API key

        def fail() -> None:
            tid = optuna_private.trial_id(trial)
            if optuna_private.storage(self.study).get_trial(tid).state == TrialState.RUNNING:
                st.fail_and_requeue(self.study, trial, failure=failure, reason=reason)

        self.db(fail)

    # -- the database going away --------------------------------------------------------
    def db(self, action: Callable[[], T]) -> T:
        """Run a study read or write; a database that went away is waited out, then retried."""
        while True:
            try:
                return action()
            except DATABASE_ERRORS as err:
                db = workers.rdb(self.study)
                if db is None:
                    raise
                wait_for_database(
                    db,
                    err,
                    timeout=self.cfg.target.infra_timeout,
                    stopping=lambda: self.stop.requested,
                )


#: Failures of a server that served: a verdict on the config, even for the unit as it is.
SERVED_FAILURES = ("capacity",)
#: Failures before the server was ready (the rest happened under the benchmark's load).
DID_NOT_START = ("refused", "out_of_memory", "crash_on_start", "not_ready")

#: The failure that one redeploy must confirm: the server started fine, then died under load.
CRASH = "crash_during_benchmark"


def confirm_crash(measure: Measure) -> Measure:
    """`measure`, with a crash during the benchmark confirmed by deploying once more.

    A config that loaded and then died under load is marked infeasible forever
    after; on GPUs a transient fault (an Xid, an NCCL timeout) does that to a good
    config. So it is deployed once more: crashing again confirms it, running
    through makes the second attempt the trial's result. Both attempts are kept
    (`first_attempt`, `crash_confirmed`, both server logs).
    """

    def measured(
        params: dict[str, Any] | None, find_measured: FindMeasured, plan: LevelPlan | None = None
    ) -> TrialResult:
        first = measure(params, find_measured, plan)
        if first.attrs.get(records.FAILURE) != CRASH:
            return first
        log.warning(
            "the server crashed during the benchmark after starting fine: deploying it once "
            "more before calling the config infeasible",
            reason=first.attrs.get(records.REASON),
        )
        second = measure(params, find_measured, plan)
        confirmed = second.attrs.get(records.FAILURE) == CRASH
        second.attrs[records.FIRST_ATTEMPT] = {
            k: first.attrs[k] for k in ("failure", "reason") if k in first.attrs
        }
        second.attrs[records.CRASH_CONFIRMED] = confirmed
        second.server_log = (
            f"--- first attempt: crashed during the benchmark ---\n{first.server_log}\n"
            f"--- second attempt ---\n{second.server_log}"
        )
        if confirmed:
            log.warning("crashed again: infeasible", reason=second.attrs.get(records.REASON))
        else:
            log.info("the second attempt ran through: the first crash is recorded, not held")
        return second

    return measured


def _fmt(values: list[float] | None) -> str:
    return ", ".join(f"{v:.1f}" for v in values or [])
