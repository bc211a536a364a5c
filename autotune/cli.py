"""`autotune` commands. Each maps onto one module; this file only parses and prints."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import __version__
from autotune.errors import AutotuneError

if TYPE_CHECKING:
    from autotune.config import Config

# Subcommands that hand their whole argument list to another parser.
#: Commands whose output a person reads: their log lines stay readable when piped.
_FOR_PEOPLE = frozenset({"init", "validate", "status", "best", "forget", "report"})
#: Commands that count the study's trials against its total (`with_budget`).
_STUDY_COMMANDS = frozenset({"start", "status", "best", "report"})
_PASSTHROUGH: dict[str, str] = {"sim": "autotune.sim.cli", "bench": "autotune.bench.cli"}


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in _PASSTHROUGH:
        import importlib

        module = importlib.import_module(_PASSTHROUGH[args_list[0]])
        return int(module.main(args_list[1:]) or 0)

    parser = _parser()
    args = parser.parse_args(args_list)
    args.argv = args_list  # a `workers:` config starts itself once per worker
    from autotune import log

    json_logs = True if args.log_format == "json" else None if args.log_format == "auto" else False
    if json_logs is None and args.command in _FOR_PEOPLE:
        # Read by a person, through `tee` or `less` too: JSON only under journald, or asked.
        forced = os.environ.get("AUTOTUNE_LOG_FORMAT", "").lower()
        json_logs = forced == "json" or (not forced and "JOURNAL_STREAM" in os.environ)
    level = "DEBUG" if args.verbose else "INFO"
    if args.command in ("validate", "init") and not args.verbose:
        level = "WARNING"  # the checks' own lines say what was seen; info lines interleave
    log.setup(level=level, json=json_logs)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a reader gone (`| head`) shows here, not in the flush at exit
        return code
    except AutotuneError as exc:
        return _fail(f"autotune: error: {exc}", exc.exit_code)
    except KeyboardInterrupt:
        return _fail("autotune: interrupted", 130)
    except BrokenPipeError:
        # The reader left (`autotune status | head`): what it read was all it wanted. Quiet,
        # and with a shell's code for a death by SIGPIPE; stdout goes nowhere from now on,
        # so that the flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except Exception as exc:
        if args.verbose:
            raise
        return _fail(
            f"autotune: internal error: {type(exc).__name__}: {exc} "
            "(run with -v for the traceback, and please report it)",
            1,
        )


def _fail(line: str, code: int) -> int:
    """The one line an error gets: plain on a terminal, a JSON line for journald."""
    from autotune import log

    if log.is_json():
        log.get("autotune").error(line, exit_code=code)
    else:
        print(line, file=sys.stderr)
    return code


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="autotune",
        description="Bayesian tuning of speculative-decoding settings for LLM inference servers.",
    )
    p.add_argument("--version", action="version", version=f"autotune {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument(
        "--log-format",
        choices=("auto", "console", "json"),
        default="auto",
        help="console for people, json for journald (auto: json when not a terminal)",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        name: str,
        func: Callable[[argparse.Namespace], int],
        help_: str,
        study_args: bool = True,
        worker_arg: bool = False,
    ) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_)
        sp.set_defaults(func=func)
        which = sp.add_mutually_exclusive_group()
        which.add_argument("--config", "-c", help="config file (default: ./autotune.yaml)")
        which.add_argument(
            "--demo",
            action="store_true",
            help="the built-in demo: a simulated SGLang server on this machine, its study in "
            "./autotune.db",
        )
        if study_args:
            sp.add_argument("--storage", help="override study.storage (a database URL)")
            sp.add_argument("--study", help="override study.name")
        if worker_arg:
            sp.add_argument(
                "--worker",
                metavar="NAME",
                help="only this worker of the config's workers: list (default: every one)",
            )
        return sp

    start = add(
        "start", _start, "start or resume a study (or join it as one more worker)", worker_arg=True
    )
    start.add_argument("--n-trials", type=int, help="the study's total number of trials")
    start.add_argument(
        "--until", metavar="HH:MM", help="stop cleanly at this local time (the level finishes)"
    )
    start.add_argument(
        "--max-hours", type=float, metavar="H", help="stop cleanly after this many hours"
    )
    for name, func, help_ in (
        ("status", _status, "one row per trial"),
        ("best", _best, "the best feasible trial"),
    ):
        sp = add(name, func, help_)
        sp.add_argument("--json", action="store_true", help="machine-readable output")
    init = sub.add_parser(
        "init",
        help="write autotune.yaml from the live unit, then validate it",
        description="Read the unit as systemd loads it (fragment and drop-ins), find the "
        "engine and its speculative settings, write a commented autotune.yaml and a copy "
        "of the unit, then run validate. Changes nothing on the host.",
    )
    init.set_defaults(func=_init)
    init.add_argument("--unit", help="the service, e.g. sglang.service")
    where = init.add_mutually_exclusive_group(required=True)
    where.add_argument("--ssh", metavar="USER@HOST[:PORT]", help="the GPU host, over SSH")
    where.add_argument("--local", action="store_true", help="this machine's systemd")
    where.add_argument("--unit-file", help="a unit file run here as a child (local-process)")
    init.add_argument("--key-file", help="SSH private key (default: the agent, ~/.ssh/id_*)")
    init.add_argument("--known-hosts", help="SSH known_hosts file (default: ~/.ssh/known_hosts)")
    init.add_argument(
        "--systemctl", default="systemctl", help="systemctl on the host, if not on its PATH"
    )
    init.add_argument("--out", default=".", help="folder for autotune.yaml (default: .)")
    init.add_argument(
        "--storage",
        dest="init_storage",
        default="sqlite:///autotune.db",
        help="study.storage to write (default: sqlite:///autotune.db beside the config)",
    )
    init.add_argument("--force", action="store_true", help="overwrite existing files")
    add(
        "validate",
        _validate,
        "check config, search space, unit file and host; change nothing",
        worker_arg=True,
    )
    forget = add(
        "forget",
        _forget,
        "take back trials recorded wrongly (a host's failure, say): FAIL, their configs "
        "queued again",
    )
    forget.add_argument("trials", nargs="*", type=int, metavar="TRIAL", help="trial numbers")
    forget.add_argument("--kind", help="every finished trial whose failure is KIND")
    forget.add_argument(
        "--failed-since",
        metavar="TIME",
        help="every finished trial that failed at or after TIME (HH:MM today, or ISO date-time)",
    )
    apply = add(
        "apply",
        _apply,
        "deploy the best (or a given) trial's config and wait until it serves",
        worker_arg=True,
    )
    apply.add_argument("--trial", type=int, help="trial number (default: the best feasible trial)")
    add(
        "restore",
        _restore,
        "put the original unit back, restart it and wait until it serves",
        worker_arg=True,
    )
    export = add(
        "export-adaptive",
        _export_adaptive,
        "write the config that runs each concurrency level's winner: SGLang's adaptive "
        "config, or vLLM's per-batch-size draft length",
    )
    export.add_argument("--out", help="the JSON file (default: <study>-adaptive.json by the db)")
    export.add_argument(
        "--measure",
        action="store_true",
        help="deploy and benchmark it (and SGLang's default adaptive config if the study has "
        "not), then compare per level",
    )
    dashboard = add("dashboard", _dashboard, "optuna-dashboard for the study, on 127.0.0.1")
    dashboard.add_argument("--port", type=int, default=8080, help="port (default: 8080)")
    report = add("report", _report, "write the study's HTML report")
    report.add_argument("--out", default=".", help="folder for <study>-report.html (default: .)")
    sub.add_parser("sim", help="run the simulated SGLang server (see: autotune sim --help)")
    sub.add_parser("bench", help="benchmark a running server (see: autotune bench --help)")
    return p


def _load(args: argparse.Namespace) -> Any:
    from autotune.config import load_config

    cfg = load_config(args.config, demo=getattr(args, "demo", False))
    study = cfg.study
    if getattr(args, "storage", None):
        from pathlib import Path

        from autotune.config import absolute_sqlite

        study = replace(study, storage=absolute_sqlite(args.storage, Path.cwd()))
    if getattr(args, "study", None):
        study = replace(study, name=args.study)
    asked = getattr(args, "n_trials", None)
    if asked is not None and asked < 1:
        raise AutotuneError("--n-trials must be at least 1")
    cfg = replace(cfg, study=study)
    if getattr(args, "worker", None):
        cfg = cfg.for_worker(args.worker)
    if args.command in _STUDY_COMMANDS:
        from autotune.search import study as st

        cfg = st.with_budget(cfg, asked, announce=args.command == "start")
    return cfg


def _each_worker(cfg: Any) -> list[Any]:
    """The config as each of its workers sees it (just itself without a workers: list)."""
    if cfg.worker is not None or not cfg.workers:
        return [cfg]
    return [cfg.for_worker(w.name) for w in cfg.workers]


def _start(args: argparse.Namespace) -> int:
    from autotune.log import get
    from autotune.run import loop
    from autotune.run.stopping import StopRequest, deadline_from

    cfg = _load(args)
    try:
        deadline = deadline_from(args.until, args.max_hours)
    except ValueError as exc:
        raise AutotuneError(str(exc)) from None
    if cfg.workers and cfg.worker is None:
        from autotune.run import fleet

        return fleet.start_workers(cfg, args.argv)
    stop = StopRequest()
    stop.install_signal_handlers()
    summary = loop.run_study(cfg, stop=stop, deadline=deadline)

    log = get("autotune")
    if summary.best:
        log.info(
            "best so far",
            trial=summary.best["trial"],
            config=summary.best["resolved"],
            value=summary.best["value"],
        )
    else:
        log.warning("no feasible trial yet")
    if summary.stopped:
        log.warning(
            "study stopped before its budget",
            reason=summary.stopped,
            hint="autotune start resumes it",
        )
    log.info(
        "study finished" if summary.budget_spent else "study paused",
        study=summary.study,
        finished=summary.finished,
        ran_now=summary.ran,
        deployed_now=summary.deployed,
        reused_now=summary.reused,
        **({"predicted_infeasible_now": summary.predicted} if summary.predicted else {}),
    )
    if summary.serving is not None:
        print(summary.serving.sentence(cfg))
    return 0


def _status(args: argparse.Namespace) -> int:
    from autotune.search import study as st
    from autotune.store.storage import redact

    cfg = _load(args)
    study = st.open_study(cfg, create=False)
    from autotune.run import eta
    from autotune.search import estimate, perf, records

    rows = [_row(study, t) for t in study.get_trials(deepcopy=False)]
    alive = {w.trial: w for w in st.liveness(study, cfg)}
    for r in rows:
        w = alive.get(r["number"])
        r["heartbeat_age_s"] = None if w is None else w.age_s
        r["stale"] = w is not None and w.stale
        if r["stale"]:
            r["progress"] = None  # what a gone worker last showed is not "now"
    best = {t.number for t in st.best_trials(study)}
    for r in rows:
        r["best"] = r["number"] in best  # what `autotune best` names
    e = eta.of(cfg, study, live=any(not w.stale for w in alive.values()))
    model = study.user_attrs.get(records.STUDY_PERFORMANCE_MODEL)
    if args.json:
        body = {
            "study": study.study_name,
            "n_trials": cfg.study.n_trials,
            "finished": st.finished_count(study),
            "metric_names": study.metric_names,
            "trials": rows,
            "workers": [vars(w) for w in alive.values()],
        }
        body["time"] = None if e is None else vars(e)
        body["performance_model"] = model
        print(json.dumps(body, indent=2))
        return 0
    print(
        f"study {study.study_name}: {st.finished_count(study)} of {cfg.study.n_trials} trials "
        f"finished ({redact(cfg.study.storage)})"
    )
    if e is not None:
        print(f"time: {estimate.sentence(e)}")
    for w in alive.values():
        print(f"worker: {w.sentence()}")
    orphan = _orphaned_server(cfg, list(alive.values()))
    if orphan is not None:
        print(orphan)
    if isinstance(model, dict):
        print(f"performance model: {perf.describe(model)}")
    # The objective's unit over its column: throughput in output tokens per second.
    unit = "tok/s" if cfg.objective.mode in ("geomean", "single") else "value"
    header = f"{'#':>4}  {'state':9} {'feasible':8} {unit:>10} {'±95%':>6}  config / reason"
    print(header)
    for r in rows:
        value = (
            ""
            if r["value"] is None
            else (f"{r['value']:.1f}" if isinstance(r["value"], float) else str(r["value"]))
        )
        config = " ".join(
            f"{k.removeprefix('speculative_')}={_short(v)}" for k, v in r["config"].items()
        )
        if not config:
            queued = r["state"] == "WAITING"
            config = "the unit as it is" if r["baseline"] or not queued else "queued again"
        extra = f"  [{r['reason']}]" if r["reason"] else ""
        if r["forgotten"]:
            was = r["forgotten"].get("was")
            extra = f"  [forgotten: was {was}" + (f", {r['reason']}]" if r["reason"] else "]")
        extra += f"  (= trial {r['reused_from']})" if r["reused_from"] is not None else ""
        extra += "  baseline" if r["baseline"] else ""
        extra += "  BEST" if r["best"] else ""
        if r["uncertain_levels"]:
            # Missed its confidence target even when measured twice: the sampler and the
            # finalists treat it as that noisy; so should the reader.
            extra += "  UNCERTAIN at c=" + ",".join(str(c) for c in r["uncertain_levels"])
        if r["close_constraints"]:
            # Measured twice and still either side of its limit: feasible only by this chance.
            extra += f"  CLOSE CALL {','.join(r['close_constraints'])} (feasible p="
            extra += f"{r['feasible_p']:.2f})" if r["feasible_p"] is not None else "?)"
        if r["pruned"]:
            p = r["pruned"]
            after = ",".join(str(c) for c in p.get("after_levels") or [])
            value = f"~{p.get('estimate', 0.0):.1f}"
            within = {"its window so far": " (cut short)", "one run, before a second": " (one run)"}
            extra += (
                f"  pruned after c={after}{within.get(p.get('when', ''), '')}: "
                f"{p.get('p_beat', 0.0):.2%} chance to beat "
                f"trial {p.get('incumbent')}"
            )
        feasible = {True: "yes", False: "no", None: ""}[r["feasible"]]
        ci = "" if r["value_ci"] is None or r["forgotten"] else f"{r['value_ci']:.1%}"
        state = "STALE" if r["stale"] else r["state"]
        print(f"{r['number']:>4}  {state:9} {feasible:8} {value:>10} {ci:>6}  {config}{extra}")
    for r in rows:
        if r["progress"]:
            print(f"now: {r['progress']}")
    return 0


def _orphaned_server(cfg: Config, workers: list[Any]) -> str | None:
    """A local server whose worker was killed mid-trial runs on, serving nobody, until the
    next `start` stops it: say so, with how to stop it now."""
    from autotune.deploy.local_process import leftover_server
    from autotune.run.deployment import state_dir

    if cfg.target.deploy != "local-process" or not any(w.stale for w in workers):
        return None
    pgid = leftover_server(state_dir(cfg))
    if pgid is None:
        return None
    return (
        f"server: pid {pgid}, started by the worker that is gone, still runs: `autotune "
        f"start` stops it before its next trial, or `kill -- -{pgid}` now"
    )


def _short(value: Any) -> str:
    """A knob's value as a person reads it: a float (an enqueued trial's raw fraction) to
    three significant digits."""
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _row(study: Any, t: Any) -> dict[str, Any]:
    from autotune.run.finalists import validation_of
    from autotune.search import records
    from autotune.search import study as st

    r = records.TrialRecord.of(t)
    values = t.values
    gone = st.forgotten(t)
    config = st.trial_config(t)
    if not config and t.state.name == "WAITING":
        config = dict(t.system_attrs.get(records.FIXED_PARAMS) or {})  # enqueued, not yet asked
    return {
        "number": t.number,
        "state": "FORGOTTEN" if gone else t.state.name,
        "forgotten": gone,
        "params": dict(t.params),
        "config": config,
        "value": None if values is None else (values[0] if len(values) == 1 else list(values)),
        "feasible": st.is_feasible(t) if t.state.name == "COMPLETE" else None,
        "reason": r.reason,
        "failure": r.failure,
        "reused_from": r.reused_from,
        "baseline": r.baseline,
        "value_ci": r.value_ci,
        "uncertain_levels": r.uncertain_levels,
        "close_constraints": r.close_constraints,
        "feasible_p": r.feasible_p,
        "validation": validation_of(study, t.number),
        "pruned": r.pruned if t.state.name == "PRUNED" else None,
        "predicted": r.predicted,
        # What the worker's status line showed last (written every few seconds).
        "progress": r.progress if t.state.name == "RUNNING" else None,
    }


def _forget(args: argparse.Namespace) -> int:
    from autotune.commands import forget

    cfg = _load(args)
    if not args.trials and args.kind is None and args.failed_since is None:
        raise AutotuneError("forget: name trials, or give --kind KIND or --failed-since TIME")
    done = forget.forget(cfg, args.trials, kind=args.kind, failed_since=args.failed_since)
    if not done:
        print("nothing to forget: no finished trial matches")
        return 0
    print(
        f"forgotten: trial{'s' if len(done) > 1 else ''} {', '.join(map(str, done))} "
        "(FAIL now, configs queued again): autotune start measures them anew"
    )
    return 0


def _best(args: argparse.Namespace) -> int:
    from autotune.run import loop
    from autotune.search import study as st

    cfg = _load(args)
    study = st.open_study(cfg, create=False)
    best = st.best_trials(study)
    if not best:
        raise AutotuneError(f"study {study.study_name!r} has no feasible trial yet")
    described = [loop.describe(study, t) for t in best]
    if args.json:
        print(json.dumps(described[0] if len(described) == 1 else described, indent=2))
        return 0
    for w in st.liveness(study, cfg):
        print(f"worker: {w.sentence()}")
    base = st.baseline_trial(study)
    for t, d in zip(best, described, strict=True):
        head, *more = _value_text(cfg, study, t, base)
        print(f"best trial {d['trial']} of study {d['study']}: {head}")
        print(f"  ({d['chosen_by']})")
        for line in more:
            print(f"  {line}")
        known = {k: v for k, v in d["resolved"].items() if k in cfg.space.params}
        if known and cfg.space.complete(known):
            print(f"  {cfg.space.describe(known)}")
        for k, v in d["resolved"].items():
            if k not in known:
                print(f"  --{k.replace('_', '-')} {v}")
        for line in _metric_lines(d["metrics"]):
            print(f"  {line}")
    return 0


def _value_text(cfg: Any, study: Any, t: Any, base: Any) -> list[str]:
    """`283.2 tok/s (geomean over c=1,16,64), 95 % 276.1 … 290.4 over 3 deployments,
    +14.7 % (+9.1 … +20.6) over the unit as it was (trial 0: ...)`, and the spread between
    deployments that interval comes from: never a gain from one lucky draw."""
    from autotune.search import deployments

    o = cfg.objective
    if o.mode == "geomean":
        what = "geomean of output tok/s over c=" + ",".join(map(str, cfg.benchmark.concurrency))
    elif o.mode == "single":
        what = f"output tok/s at c={o.level}"
    elif o.mode == "goodput":
        what = f"goodput at {o.rate} req/s"
    elif o.mode == "max_rate":
        what = "the highest request rate that meets the SLO"
    else:
        what = o.mode
    unit = "req/s" if cfg.objective.mode == "max_rate" else "tok/s"
    if len(t.values or []) != 1:
        return [", ".join(f"{v:.1f}" for v in t.values or []) + f" {unit} (Pareto front)"]
    h = deployments.headline(study, t, base)
    if h is None:
        return [f"{t.values[0]:.1f} {unit} ({what})"]
    n = h.worth.deployments
    text = (
        f"{h.worth.value:.1f} {unit} ({what}), 95 % {h.worth.low:.1f} … {h.worth.high:.1f} "
        f"over {n} deployment{'s' if n != 1 else ''}"
    )
    if h.is_baseline:
        text += ": the unit as it was is the best"
    elif h.gain is not None and h.baseline is not None and base is not None:
        k = h.baseline.deployments
        text += (
            f", {h.gain.text()} over the unit as it was (trial {base.number}: "
            f"{h.baseline.value:.1f} {unit} over {k} deployment{'s' if k != 1 else ''})"
        )
    return [text, f"spread: {h.spread.text()}"]


def _validation_line(v: dict[str, Any]) -> str:
    """The finalist stage's verdict on this trial, in words."""
    again = v.get("values") or []
    text = "finalists: measured again " + (
        " · ".join(f"{x:.1f}" for x in again) if again else "(failed)"
    )
    if isinstance(v.get("p_best"), float):
        text += f"; the best with p {v['p_best']:.0%}"
    phase = v.get("load_phase") or {}
    if phase:
        held = "held up" if phase.get("held_up") else "did not hold up"
        tok = phase.get("tok_s")
        text += f"; {held} under changing load" + (f" ({tok:.1f} tok/s)" if tok else "")
    return text


def _metric_lines(metrics: dict[str, Any]) -> list[str]:
    """Per-level figures on one line each, in a person's units; empty fields left out."""
    lines = []
    tok = {k.split("@c", 1)[1]: v for k, v in metrics.items() if k.startswith("output_tok_s@c")}
    if tok:
        lines.append("output tok/s: " + " · ".join(f"c={c} {v:.1f}" for c, v in tok.items()))
    acc = {k.split("@c", 1)[1]: v for k, v in metrics.items() if k.startswith("accept_length@c")}
    if acc:
        lines.append("accept length: " + " · ".join(f"c={c} {v:.2f}" for c, v in acc.items()))
    done = {*(f"output_tok_s@c{c}" for c in tok), *(f"accept_length@c{c}" for c in acc)}
    if acc:
        done.add("accept_length")  # the levels' own, above
    for key, value in metrics.items():
        # The value's interval and its worth over deployments are in the headline already.
        if key in done or key in ("value_ci", "over_deployments") or value in (None, [], {}, ""):
            continue
        if key == "uncertain_levels":
            lines.append("uncertain at c=" + ",".join(str(c) for c in value))
        elif key == "validation" and isinstance(value, dict):
            lines.append(_validation_line(value))
        elif isinstance(value, float):
            shown = f"{value:.1%}" if key.endswith(("_share", "acceptance")) else f"{value:.2f}"
            lines.append(f"{key.replace('_', ' ')}: {shown}")
        elif isinstance(value, dict | list):
            lines.append(f"{key.replace('_', ' ')}: {json.dumps(value)}")
        else:
            lines.append(f"{key.replace('_', ' ')}: {value}")
    return lines


def _init(args: argparse.Namespace) -> int:
    from pathlib import Path

    from autotune.commands import init

    if args.unit_file:
        unit_file = Path(args.unit_file).resolve()
        where = init.Where("local-process", {}, args.unit or unit_file.name, unit_file)
    else:
        if not args.unit:
            raise AutotuneError("--unit is required with --ssh and --local (e.g. sglang.service)")
        ssh = init.parse_ssh(args.ssh, args.key_file, args.known_hosts) if args.ssh else {}
        deploy = "ssh" if args.ssh else "local-systemd"
        where = init.Where(deploy, ssh, args.unit, systemctl=args.systemctl)
    config, notes = init.run(where, Path(args.out), storage=args.init_storage, force=args.force)
    print(f"wrote {config}")
    for note in notes:
        print(f"note: {note}")
    args.config = str(config)
    args.worker = None
    print(f"validating {config}:")
    try:
        worst = _validate(args)
    except AutotuneError:
        _keep_as_draft(config)
        raise
    if worst:
        _keep_as_draft(config)
    return worst


def _keep_as_draft(config: Path) -> None:
    """`start` finds autotune.yaml by itself: a config that failed its checks must not be
    the one it finds. It is kept beside, to be fixed."""
    draft = config.with_name(config.name + ".draft")
    config.replace(draft)
    print(
        f"not kept as {config.name}: its checks failed. The config is in {draft}: fix it "
        f"and rename it to {config.name}, or run init again",
        file=sys.stderr,
    )


def _validate(args: argparse.Namespace) -> int:
    from autotune.commands import validate

    worst = 0
    for cfg in _each_worker(_load(args)):
        who = f"worker {cfg.worker}: " if cfg.worker else ""
        findings = validate.run(cfg)
        for f in findings:
            if f.skipped:
                print(f"skipped  {who}{f.check}: {f.text}")
            elif f.warning:
                print(f"warning  {who}{f.check}: {f.text}")
            elif f.ok:
                print(f"ok  {who}{f.check}: {f.text}")
            else:
                worst = 2
                _fail(f"autotune: error: {who}{f.check}: {f.text}", 2)
        if all(f.ok and not f.skipped for f in findings):
            print(
                f"{cfg.source}: {who}ok ({cfg.space_source}: {cfg.space.size()} configs; "
                f"unit {cfg.target.unit}; deploy {cfg.target.deploy})"
            )
    return worst


def _apply(args: argparse.Namespace) -> int:
    from autotune.run import deployment

    for cfg in _each_worker(_load(args)):
        print(deployment.apply_trial(cfg, args.trial).sentence(cfg))
    return 0


def _restore(args: argparse.Namespace) -> int:
    from autotune.run import deployment

    for cfg in _each_worker(_load(args)):
        print(deployment.restore_original(cfg).sentence(cfg))
    return 0


def _export_adaptive(args: argparse.Namespace) -> int:
    from autotune.commands import export_adaptive as ea
    from autotune.commands import export_schedule as es
    from autotune.commands import phase_summary
    from autotune.search import records
    from autotune.search import study as st

    cfg = _load(args)
    if es.applies(cfg.space):
        return _export_schedule(cfg, Path(args.out) if args.out else None, args.measure)
    path, data, winners = ea.export(cfg, Path(args.out) if args.out else None)
    for w in winners:
        tok_s = f"{w.tok_s:.1f} tok/s, trial {w.trial}"
        print(f"c={w.concurrency:<4} best chain: steps {w.steps} ({tok_s})")
    print(f"wrote {path}: {json.dumps(data)}")
    if not args.measure:
        return 0
    ea.measure(cfg, data)
    study = st.open_study(cfg, create=False)
    print(ea.table(ea.comparison(cfg, study)))
    probes = study.user_attrs.get(records.STUDY_ADAPTIVE_PROBES) or {}
    print(phase_summary.table(phase_summary.phases(study, probes)))
    return 0


def _export_schedule(cfg: Config, out: Path | None, measure: bool) -> int:
    """A draft length per batch size inside the JSON flag (vLLM's per-batch-size schedule)."""
    from autotune.commands import export_schedule as es
    from autotune.commands import phase_summary
    from autotune.search import records
    from autotune.search import study as st

    path, data, winners = es.export(cfg, out)
    for w in winners:
        what = f"{w.tokens} draft tokens" if w.tokens else "no speculation"
        print(f"c={w.concurrency:<4} best: {what} ({w.tok_s:.1f} tok/s, trial {w.trial})")
    print(f"wrote {path}: --speculative-config '{json.dumps(data)}'")
    if measure:
        es.measure(cfg, data)
        study = st.open_study(cfg, create=False)
        print(es.comparison(cfg, study))
        probes = study.user_attrs.get(records.STUDY_ADAPTIVE_PROBES) or {}
        print(phase_summary.table(phase_summary.phases(study, probes)))
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from autotune.commands import dashboard

    return dashboard.serve(_load(args), args.port)


def _report(args: argparse.Namespace) -> int:
    from autotune.report import build_report

    print(build_report(_load(args), args.out))
    return 0
