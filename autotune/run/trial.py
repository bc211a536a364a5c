"""The pipeline of one trial: unit text -> deploy -> ready -> server info -> benchmark -> score.

This is the only module that wires a deployer, an engine and the load
generator together. It knows nothing about Optuna: the study code hands it a
config and gets back a `TrialResult` to record.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from autotune import bench
from autotune import log as alog
from autotune.bench.arrivals import Trace, TraceError, load_trace
from autotune.bench.open_loop import RateResult
from autotune.bench.pool import pool_levels
from autotune.config import Config
from autotune.deploy.base import Deployer
from autotune.deploy.tunnel import Tunnel
from autotune.engines import auth_headers, key_refused
from autotune.engines.base import STUDY_FAILURES, Engine, Failure, ServerInfo
from autotune.errors import (
    HOST_FAILURES,
    ConfigError,
    DeployError,
    HostFailed,
    ServerFailed,
    StudyStopped,
)
from autotune.log import get
from autotune.run import level_log, trial_attrs
from autotune.run.load_phase import measure_phase
from autotune.run.measuring import Measuring
from autotune.run.rates import measure_rates, rate_attrs
from autotune.run.stopping import StopRequest
from autotune.search import objective, records
from autotune.search.pruning import PRUNED, LevelPlan, Verdict
from autotune.space import Params
from autotune.unit import reach, secrets

log = get("autotune.run.trial")

#: Looks up an earlier trial that measured the same resolved config; returns its number.
FindMeasured = Callable[[Mapping[str, Any]], int | None]


@dataclass
class TrialResult:
    score: objective.Score
    attrs: dict[str, Any]
    unit_text: str
    server_log: str = ""
    levels: list[dict[str, Any]] = field(default_factory=list)
    reused_from: int | None = None
    pruned: bool = False
    """Stopped after some levels (`attrs[records.PRUNED]` says why): recorded PRUNED."""


class TrialPipeline:
    def __init__(
        self,
        cfg: Config,
        deployer: Deployer,
        engine: Engine,
        base_unit: str,
        api_key: str | None = None,
        stop: StopRequest | None = None,
        *,
        url: str | None = None,
        tunnel: Tunnel | None = None,
    ) -> None:
        self.stop = stop or StopRequest()
        self.cfg = cfg
        self.url = url or cfg.target.base_url
        """Where requests go: `target.base_url`, or the SSH link's local end."""
        self.tunnel = tunnel
        """The SSH link's forward `url` goes through: a level it cut is the host's failure."""
        self.deployer = deployer
        self.engine = engine
        self.base_unit = base_unit
        self.api_key = api_key
        # Whatever a trial records or logs from here on has them masked.
        secrets.remember(api_key)
        secrets.remember_unit(base_unit, str(cfg.target.unit_file))
        self.serving: tuple[str, dict[str, str | None]] | None = None
        """The unit text and companion files of the last deploy that got through."""
        self.trace = _trace(cfg)
        """The arrival times `benchmark.arrivals` names, read once: every trial replays the
        same ones even if the file changes during the study."""
        self.load_phase = False
        """Run the changing-load phase after the levels (a finalist's first re-measurement,
        an adaptive probe): `attrs[records.LOAD_PHASE]`."""
        self.workload = bench.load_workload(
            cfg.benchmark.workload, max_tokens=cfg.benchmark.max_tokens, seed=cfg.study.seed or 0
        )
        self.deck: bench.PromptDeck | None = None
        """The last trial's prompts: a second pass over the same deployment draws on from
        where the first stopped (a prompt sent again would hit the server's prefix cache)."""

    @property
    def unit_dir(self) -> str:
        """The unit's directory on the host: where companion files go."""
        return str(self.cfg.target.unit_file.parent)

    def unit_for(self, params: Params | None) -> str:
        """The base unit with the trial's flags patched in (the base unit itself for None)."""
        if params is None:
            return self.base_unit
        return self.cfg.space.patch_unit(self.base_unit, params, unit_dir=self.unit_dir)

    def files_for(self, params: Params | None) -> dict[str, str | None]:
        """The companion files the trial's config writes on the host (none for None)."""
        if params is None:
            return {}
        return self.cfg.space.files(params, self.unit_dir)

    def run(
        self,
        params: Params | None,
        find_measured: FindMeasured,
        plan: LevelPlan | None = None,
        *,
        deployment: tuple[str, Mapping[str, str | None]] | None = None,
    ) -> TrialResult:
        """Deploy `params` (None = the unit unchanged), wait, measure and score it.

        A config the server refuses or crashes on is a result (infeasible), not
        an exception. Transport failures (`DeployError`) propagate: they are
        not the config's fault. `plan` orders the levels and may stop the trial
        after one (`autotune/search/pruning.py`); without it every level runs in order.
        `deployment` (unit text, companion files) replaces what `params` would deploy:
        a config outside the space, measured and checked as `params` says it runs.
        """
        unit_text = self.unit_for(params) if deployment is None else deployment[0]
        attrs: dict[str, Any] = {records.WORKLOAD: self.workload.name}
        started = time.monotonic()
        log.info("deploying", target=self.deployer.description, flags=_flags_text(params, self.cfg))
        files = dict(self.files_for(params) if deployment is None else deployment[1])
        attrs.update(trial_attrs.files(files))
        self.serving = None
        self.deployer.deploy(unit_text, files)
        self.serving = (unit_text, files)
        try:
            info = self._ready_info()
        except ServerFailed as failed:
            self.serving = None  # what runs there now is not a config that serves
            return self._failed(failed, params, attrs, unit_text, "server failed")
        info = self._inspect(params, info, attrs, started)
        gated = self._gate(info, find_measured, attrs, unit_text)
        if gated is not None:
            return gated
        try:
            measured, verdict, rates = self._measure(info, plan, attrs)
        except ServerFailed as failed:
            # A server that refuses the workload's requests (a context too small) is up.
            up = failed.kind == "context_too_small"
            return self._failed(
                failed, params, attrs, unit_text, "server failed during benchmark", up=up
            )
        return self._score(info, measured, verdict, rates, attrs, unit_text)

    def measure_again(self) -> dict[int, bench.LevelResult]:
        """Every level once more on the deployment serving now, without redeploying: a
        sweep's level-to-level spread within one deployment (`experiments/llamacpp_sweep.py`)."""
        if self.serving is None or self.deck is None:
            raise RuntimeError("nothing measured is serving: run a trial first")
        info = self._ready_info()
        measured, _ = self._benchmark(info, LevelPlan(self.cfg.benchmark.concurrency), self.deck)
        return measured

    # -- the steps of a trial -------------------------------------------------------
    def _ready_info(self) -> ServerInfo:
        """Wait until the deployed server is ready, and ask it what it runs."""
        self.wait_ready()
        return asyncio.run(self.engine.server_info(self.url, self._param_names(), self.api_key))

    def _inspect(
        self, params: Params | None, info: ServerInfo, attrs: dict[str, Any], started: float
    ) -> ServerInfo:
        """What the ready server says it runs, checked against what the trial asked for."""
        attrs[records.STARTUP_S] = round(time.monotonic() - started, 1)
        # A record from the log lists only what differs from the server's defaults (vLLM's
        # non-default args): a flag written at its default value is not on it.
        partial = info.launch_flags is None
        if partial:
            logged = self.engine.launch_flags_from_log(self.deployer.logs())
            info = dataclasses.replace(info, launch_flags=logged)
        if params is not None:
            self._check_reached(params, info, partial=partial)
        info = _with_logged_capacity(info, self.engine.capacity_from_log(self.deployer.logs()))
        attrs.update(trial_attrs.server(info))
        attrs[records.RESOLVED] = self._canonical({**(params or {}), **info.resolved})
        log.info(
            "server ready",
            startup_s=attrs[records.STARTUP_S],
            max_running_requests=info.max_running_requests,
            max_total_num_tokens=info.max_total_num_tokens,
        )
        return info

    def _gate(
        self, info: ServerInfo, find_measured: FindMeasured, attrs: dict[str, Any], unit: str
    ) -> TrialResult | None:
        """The result without a benchmark: the config was measured before under another
        name, or the server runs too few requests at once; None to measure it."""
        levels = self.cfg.benchmark.concurrency
        earlier = find_measured(attrs[records.RESOLVED])
        if earlier is not None:
            log.info("already measured", as_trial=earlier, resolved=attrs[records.RESOLVED])
            score = objective.unusable(self.cfg.objective, levels, server_up=True)
            result = self._result(score, attrs, unit)
            result.reused_from = earlier
            return result
        violation = objective.capacity_violation(self.cfg.objective, info.max_running_requests)
        if violation <= 0:
            return None
        reason = (
            f"max_running_requests {info.max_running_requests} is below the required "
            f"{self.cfg.objective.constraints.min_running_requests}"
        )
        attrs.update(trial_attrs.failure("capacity", reason))
        log.info("infeasible: not benchmarked", reason=reason)
        score = objective.unusable(
            self.cfg.objective,
            levels,
            server_up=True,
            max_running_requests=info.max_running_requests,
        )
        return self._result(score, attrs, unit)

    def _measure(
        self, info: ServerInfo, plan: LevelPlan | None, attrs: dict[str, Any]
    ) -> tuple[dict[int, bench.LevelResult], Verdict | None, list[RateResult]]:
        """The levels (in the plan's order, perhaps stopped early), then the open-loop rates
        and the changing-load phase of a trial that was not."""
        # One deck for the trial: no level repeats a prompt a warm-up or an earlier level sent.
        deck = self.deck = bench.PromptDeck(self.workload.prompts)
        levels = self.cfg.benchmark.concurrency
        measured, verdict = self._benchmark(info, plan or LevelPlan(levels), deck)
        rates: list[RateResult] = []
        if verdict is None and self.cfg.benchmark.request_rate:
            rates = measure_rates(self._measuring(), info, deck, self._check_alive)
        if verdict is None and self.load_phase:
            fixed = {c: r.output_throughput for c, r in measured.items()}
            phase = measure_phase(self._measuring(), info, deck, fixed)
            self._check_alive()
            attrs[records.LOAD_PHASE] = phase.to_dict()
        return measured, verdict, rates

    def _score(
        self,
        info: ServerInfo,
        measured: dict[int, bench.LevelResult],
        verdict: Verdict | None,
        rates: list[RateResult],
        attrs: dict[str, Any],
        unit: str,
    ) -> TrialResult:
        """The levels as the study records them, and the objective's score of them."""
        levels = self.cfg.benchmark.concurrency
        # The one place levels become rows: the study's record and the objective read these.
        results = {c: r.to_dict() for c, r in measured.items()}
        per_level = [results[c] for c in levels if c in results]
        # What the adaptive stopping rule saved against always running max_duration.
        longest = self.cfg.benchmark.max_duration * info.time_scale  # in the levels' units
        attrs.update(trial_attrs.levels(per_level, longest))
        attrs.update(trial_attrs.uncertainty(self.cfg, per_level))
        attrs.update(trial_attrs.judged(self.cfg, [r["concurrency"] for r in per_level], results))
        if rates:
            attrs.update(rate_attrs(rates))
        running = info.max_running_requests
        if verdict is not None:
            # The constraints of the levels measured; the value is the verdict's estimate.
            attrs[PRUNED] = verdict.attrs()
            scored = [c for c in levels if c in results]
            score = objective.score(self.cfg.objective, scored, results, running)
        else:
            rows = [r.to_dict() for r in rates]
            score = objective.score(self.cfg.objective, levels, results, running, rows)
        result = self._result(score, attrs, unit)
        result.levels = per_level
        result.pruned = verdict is not None
        return result

    def _failed(
        self,
        failed: ServerFailed,
        params: Params | None,
        attrs: dict[str, Any],
        unit: str,
        event: str,
        *,
        up: bool = False,
    ) -> TrialResult:
        """A server that failed this config: an infeasible result, unless the failure is
        the host's or the build's (then the study stops instead)."""
        self._not_the_configs_fault(failed, params)
        attrs.update(trial_attrs.failure(failed.kind, failed.reason))
        log.warning(event, kind=failed.kind, reason=failed.reason)
        score = objective.unusable(self.cfg.objective, self.cfg.benchmark.concurrency, server_up=up)
        return self._result(score, attrs, unit)

    # -- stages ------------------------------------------------------------------
    def _measuring(self) -> Measuring:
        """What the rates and the changing-load phase need of this trial."""
        return Measuring(
            self.cfg, self.url, self.api_key, self.engine, self.deployer, self.workload,
            self.stop, self.trace,
        )  # fmt: skip

    def wait_ready(self, *, interruptible: bool = True) -> None:
        """Until the engine's ready path answers 200; fail fast when the process dies; time out.

        `interruptible`: a stop request ends the wait (during a trial); the
        end-of-study deploy waits regardless, to leave a serving server.
        """
        paths = list(self.engine.ready_paths())
        deadline = time.monotonic() + self.cfg.target.ready_timeout
        started = time.monotonic()
        next_note = started + 5.0
        with httpx.Client(timeout=5.0, headers=auth_headers(self.api_key)) as client:
            while True:
                if interruptible:
                    self.stop.check()
                if not self.deployer.is_running():
                    text = self.deployer.logs()
                    failure = self.engine.classify_failure(text, self.deployer.exit_status())
                    raise ServerFailed(failure.kind, failure.reason, _tail(text), failure.flag)
                try:
                    status = client.get(self.url + paths[0]).status_code
                    if status == 200:
                        self._check_ours()
                        return
                    if status == 404 and len(paths) > 1:
                        paths.pop(0)  # an older build without this path: the next one
                        continue
                    if status in (401, 403):
                        raise key_refused(status, paths[0], self.api_key is not None)
                except httpx.TransportError:
                    pass  # not listening yet: the model is still loading
                now = time.monotonic()
                if now > deadline:
                    text = self.deployer.logs()
                    reason = f"not ready after {self.cfg.target.ready_timeout:.0f} s"
                    raise ServerFailed("not_ready", reason, _tail(text))
                alog.progress(level=f"loading ({now - started:.0f} s)", tok_s=None)
                if now >= next_note and not alog.live():
                    log.info("loading", waited_s=round(now - started), last_log=_last_line(self))
                    next_note = now + 5.0
                time.sleep(0.25)

    def _check_ours(self) -> None:
        """The server that answers must be the one just deployed: a stale server, or one the
        operator left on the port, answers while the deployed one fails to bind."""
        other = self.deployer.answering()
        if other is not None:
            reason = f"{self.url} is answered by {other}, not by the server autotune started"
            raise ServerFailed("not_ours", reason, _tail(self.deployer.logs()))

    def _benchmark(
        self, info: ServerInfo, plan: LevelPlan, deck: bench.PromptDeck
    ) -> tuple[dict[int, bench.LevelResult], Verdict | None]:
        """The levels in the plan's order, until one shows the config cannot win."""
        b = self.cfg.benchmark
        results: dict[int, bench.LevelResult] = {}
        if plan.levels != tuple(b.concurrency):
            log.info("levels in the order most likely to settle this config", order=plan.levels)
        for i, c in enumerate(plan.levels, 1):
            self.stop.check()  # a stop lets the running level finish, never starts the next
            row, early = self._level(i, c, info, plan, deck, results)
            results[c] = row
            if early is not None:
                return results, self._log_pruned(early[0], plan, results, early[1])
            log.info(
                "level done",
                level=f"{i}/{len(b.concurrency)}",
                concurrency=c,
                output_tok_s=round(row.output_throughput, 1),
                ci=level_log.pm(row.ci_halfwidth),
                **({"uncertain": True} if not row.ci_target_met else {}),
                requests=row.requests,
                accept_length=row.accept_length,
            )
            if i == len(plan.levels):
                break  # every level measured: stopping now would save nothing
            uncertain = {
                k: r.ci_halfwidth / 1.96
                for k, r in results.items()
                if not r.ci_target_met and b.ci_width is not None
            }
            measured = {k: r.output_throughput for k, r in results.items()}
            verdict = plan.verdict(measured, uncertain)
            if verdict is not None:
                return results, self._log_pruned(verdict, plan, results, "after the level")
        return results, None

    def _level(
        self,
        i: int,
        c: int,
        info: ServerInfo,
        plan: LevelPlan,
        deck: bench.PromptDeck,
        results: Mapping[int, bench.LevelResult],
    ) -> tuple[bench.LevelResult, tuple[Verdict, str] | None]:
        """One level: its window, cut short once it shows the config cannot win; measured
        again when it missed its confidence target (unless that one run already tells) or
        left a constraint too close to call. With the verdict and when, if it stopped."""
        b = self.cfg.benchmark
        settings = bench.LevelSettings(
            concurrency=c,
            min_duration_s=b.min_duration,
            max_duration_s=b.max_duration,
            ci_width=b.ci_width,
            server_slots=info.max_running_requests,
            **({"warmup_requests": b.warmup_requests} if b.warmup_requests is not None else {}),
        )
        log_before = len(self.deployer.logs())
        note = level_log.logger(i, len(b.concurrency), c, info.time_scale)
        measured = {k: r.output_throughput for k, r in results.items()}
        give_up = plan.give_up(c, measured)
        if give_up is not None:
            give_up.time_scale = info.time_scale
        row = self._measure_level(settings, note, log_before, deck, give_up, info.time_scale)
        if give_up is not None and give_up.verdict is not None and row.cut_short:
            return row, (give_up.verdict, "its window so far")
        if not row.ci_target_met and b.ci_width is not None:
            sd = {c: row.ci_halfwidth / 1.96}
            early = plan.verdict({**measured, c: row.output_throughput}, sd)
            if early is not None:
                return row, (early, "one run, before a second")
            # Extended to max_duration and still too noisy: measure it once more and
            # pool the two (a stall of the host rarely hits both).
            log.info(
                "level missed its confidence target: measuring it again",
                concurrency=c,
                ci=level_log.pm(row.ci_halfwidth, b.ci_width),
                target=level_log.pm(b.ci_width),
            )
            row = pool_levels(row, self._again(settings, note, deck, info), b.ci_width)
        close = self._close_calls(c, row)
        if close and not row.attempt_throughputs:
            # A constraint that may or may not hold on this many requests: more of them,
            # rather than a verdict decided by chance.
            log.info(
                "constraint too close to call: measuring the level again",
                concurrency=c,
                **{j.key: level_log.interval_text(j) for j in close},
            )
            why = "a constraint was too close to call (" + ", ".join(j.key for j in close) + ")"
            row = pool_levels(row, self._again(settings, note, deck, info), b.ci_width, why)
        return row, None

    def _again(
        self,
        settings: bench.LevelSettings,
        note: Callable[[dict[str, Any]], None],
        deck: bench.PromptDeck,
        info: ServerInfo,
    ) -> bench.LevelResult:
        """A second run of a level, to pool with the first."""
        self.stop.check()
        logs = len(self.deployer.logs())
        return self._measure_level(settings, note, logs, deck, time_scale=info.time_scale)

    def _close_calls(self, c: int, row: bench.LevelResult) -> list[objective.Judged]:
        judged = objective.judged(self.cfg.objective, [c], {c: row.to_dict()})
        return [j for j in judged.values() if j.close]

    def _log_pruned(
        self,
        verdict: Verdict,
        plan: LevelPlan,
        results: Mapping[int, Any],
        when: str,
    ) -> Verdict:
        log.info(
            "pruned: cannot plausibly beat the best so far",
            when=when,
            after_levels=list(verdict.measured),
            estimate=round(verdict.estimate, 1),
            best=round(verdict.incumbent_value, 1),
            best_trial=verdict.incumbent,
            chance=f"{verdict.p_beat:.2%}",
            skipped=[lv for lv in plan.levels if lv not in results],
        )
        return dataclasses.replace(verdict, when=when)

    def _measure_level(
        self,
        settings: bench.LevelSettings,
        note: Callable[[dict[str, Any]], None],
        log_from: int,
        deck: bench.PromptDeck,
        give_up: bench.GiveUpFn | None = None,
        time_scale: float = 1.0,
    ) -> bench.LevelResult:
        """One run of a level, from the server's caches flushed where it allows, with its
        own counters read around it."""
        url = self.url
        flushed = asyncio.run(self.engine.flush_cache(url, self.api_key))
        before = asyncio.run(self.engine.counters(url, self.api_key))
        mark = self.tunnel.mark() if self.tunnel is not None else 0
        try:
            level = asyncio.run(
                bench.run_level(
                    url,
                    self.cfg.target.model,
                    self.workload,
                    settings,
                    api_key=self.api_key,
                    endpoint=self.cfg.benchmark.endpoint,
                    on_progress=note,
                    give_up=give_up,
                    deck=deck,
                )
            )
        except bench.LevelFailed as exc:
            self._check_link(mark, str(exc))
            if not self._still_running_after(5.0):
                raise self._died(str(exc)) from None
            refused = self.engine.request_failure(self.deployer.logs()[log_from:])
            if refused is not None:
                raise ServerFailed(refused.kind, refused.reason) from None
            # The server is up but did not serve the load properly (errors, timeouts).
            raise ServerFailed("client_error", str(exc)) from None
        # Requests retried on a new link pass, but the window holds the link's stall.
        self._check_link(mark, "its figures are not the server's")
        self._check_alive()
        after = asyncio.run(self.engine.counters(url, self.api_key))
        if before is not None and after is not None:
            server = after.since(before)
            level = dataclasses.replace(level, server=server)
            if level.accept_length is None:
                level = dataclasses.replace(level, accept_length=server.accept_length)
        if level.accept_length is None:  # per-request counts beat the log's average
            logged = self.engine.accept_length_from_log(self.deployer.logs()[log_from:])
            level = dataclasses.replace(level, accept_length=logged)
        level = dataclasses.replace(level, cache_flush=flushed)
        return level.in_server_time(time_scale)

    def _check_link(self, mark: int, detail: str) -> None:
        """A level the SSH link cut is the host's failure (retried like any SSH drop), never
        the config's: DeployError when the tunnel cut a connection since `mark`."""
        cut = self.tunnel.broken_since(mark) if self.tunnel is not None else None
        if cut is not None:
            raise DeployError(f"{cut} during the level: {detail}")

    def _check_alive(self) -> None:
        if not self.deployer.is_running():
            raise self._died()

    def _died(self, fallback: str | None = None) -> ServerFailed:
        """The server died under load: a crash of the config, unless its log shows the host's
        failure (the disk filled up, the GPU fell off the bus)."""
        text = self.deployer.logs()
        named = self.engine.classify_failure(text, self.deployer.exit_status())
        if named.kind in HOST_FAILURES:
            return ServerFailed(named.kind, named.reason, _tail(text))
        reason = _last_error(text) or fallback or named.reason
        return ServerFailed("crash_during_benchmark", reason, _tail(text))

    def _canonical(self, config: dict[str, Any]) -> dict[str, Any]:
        """The config without knobs that do not apply to it (a server that resolved the
        speculative type to another has no use for the old type's knobs)."""
        space = self.cfg.space
        out: dict[str, Any] = {}
        for name in space.order:
            if name in config and space.applies(name, out):
                out[name] = config[name]
        out.update({k: v for k, v in config.items() if k not in space.params})
        return out

    def _check_reached(self, params: Params, info: ServerInfo, *, partial: bool = False) -> None:
        """Stop the study when the server runs something other than the trial asked for:
        measuring it would record the unit's own config under this trial's name."""
        space = self.cfg.space
        asked = self.engine.runs(self._canonical(dict(params)))
        flags = {name: p.label for name, p in space.params.items()}
        missed = reach.unreached(asked, info.resolved, flags)
        if not missed and info.launch_flags is not None:
            # The server's record of its own argv (SGLang 0.5.20 on): a flag autotune wrote
            # that is not on it never reached the server, whatever the resolved values say.
            written = space.flags(self._canonical(dict(params)), self.unit_dir)
            by_flag = space.launch_flags()
            for flag, want in written.items():
                got = info.launch_flags.get(flag)
                if got is None and partial:
                    continue  # at the server's default, or spelled another way (--no-x)
                ok = got is True if want is None else got is not None and reach.reached(want, got)
                if not ok:
                    name = by_flag.get(flag, flag)
                    missed = [reach.Unreached(name, flag, want, "nothing" if got is None else got)]
                    break
            for flag in space.removed_flags(self._canonical(dict(params))):
                got = info.launch_flags.get(flag)
                if not missed and got is not None and flag not in written:
                    # A flag this config leaves out (vLLM's speculation off) that the server
                    # was given all the same: it runs the unit's value instead.
                    missed = [reach.Unreached(by_flag.get(flag, flag), flag, "nothing", got)]
        if missed:
            raise StudyStopped(str(self.cfg.target.unit_file), "ExecStart", missed[0].line())

    def _not_the_configs_fault(self, failed: ServerFailed, params: Params | None) -> None:
        """Raise instead of recording a trial when the failure is the build's or the host's."""
        if failed.kind in HOST_FAILURES:
            raise HostFailed(failed.kind, failed.reason)
        if failed.kind not in STUDY_FAILURES:
            return
        flag = failed.flag
        space = self.cfg.space
        by_flag = space.launch_flags()
        if flag in by_flag and params is not None:
            raise StudyStopped(space.source, f"params.{by_flag[flag]}.flag", failed.reason)
        raise StudyStopped(str(self.cfg.target.unit_file), "ExecStart", failed.reason)

    def _still_running_after(self, grace_s: float) -> bool:
        """Whether the server survives a failed level: a dying process takes a moment to exit,
        and its requests fail before it does."""
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not self.deployer.is_running():
                return False
            time.sleep(0.1)
        return self.deployer.is_running()

    def _param_names(self) -> list[str]:
        return list(self.cfg.space.params)

    def _result(self, score: objective.Score, attrs: dict[str, Any], unit: str) -> TrialResult:
        attrs[records.FEASIBLE] = score.feasible
        return TrialResult(
            score,
            secrets.value(attrs),
            secrets.text(unit),
            server_log=secrets.text(self.deployer.logs()),
        )


def _with_logged_capacity(info: ServerInfo, logged: tuple[int | None, int | None]) -> ServerInfo:
    """Older SGLang builds report the configured max_running_requests over HTTP even when
    memory allowed fewer; the scheduler's startup line has the real cap. Trust the lower."""
    tokens, running = logged
    if running is not None and (
        info.max_running_requests is None or running < info.max_running_requests
    ):
        info = dataclasses.replace(info, max_running_requests=running)
    if info.max_total_num_tokens is None and tokens is not None:
        info = dataclasses.replace(info, max_total_num_tokens=tokens)
    return info


def _flags_text(params: Params | None, cfg: Config) -> str:
    if params is None:
        return "(unit file as is)"
    return cfg.space.describe(params)


def _trace(cfg: Config) -> Trace | None:
    if not cfg.benchmark.request_rate or cfg.benchmark.arrivals == "poisson":
        return None
    try:
        return load_trace(cfg.benchmark.arrivals)
    except TraceError as exc:  # checked with the config; changed or gone since
        raise ConfigError(cfg.source, "benchmark.arrivals", str(exc)) from None


def _tail(text: str, n: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def _last_line(p: TrialPipeline) -> str:
    lines = p.deployer.logs().rstrip().splitlines()
    return lines[-1][-160:] if lines else ""


def _last_error(text: str) -> str:
    for line in reversed(text.splitlines()):
        if "Error" in line or "error" in line or "Killed" in line:
            return line.strip()[-300:]
    return "the server process exited"


__all__ = ["Failure", "FindMeasured", "TrialPipeline", "TrialResult"]
