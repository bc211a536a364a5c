"""`autotune` commands. Each maps onto one module; this file only parses and prints."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from autotune import __version__
from autotune.errors import AutotuneError

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
        "--from",
        dest="from_study",
        metavar="STUDY",
        help="start from an earlier study of the same engine and space: its trials are read "
        "as evidence (status, best and the report name it)",
    )
    start.add_argument(
        "--from-storage",
        metavar="URL",
        help="the earlier study's database, if not this study's (with --from)",
    )
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
    apply.add_argument(
        "--check",
        action="store_true",
        help="a fleet's next host: measure the config once and say whether it holds here "
        "(within what the study measured); exit 3 when it does not, with how to tune this host",
    )
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
    if args.command == "start":
        # Before anything is written (--n-trials creates the study): a refusal creates nothing.
        args.earlier = _check_earlier(cfg, args.from_study, args.from_storage)
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
    if args.earlier is not None:
        _record_earlier(cfg, args.earlier)
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


def _check_earlier(cfg: Any, name: str | None, storage_url: str | None) -> Any:
    """`start --from`: the earlier study, checked (one line and exit 2 for each refusal);
    None without --from, or when this study started from it already (a resume, or another
    worker of a fleet: its record stands, and the earlier study is not read again)."""
    from autotune.log import get
    from autotune.search import warm_start

    if storage_url and not name:
        raise AutotuneError("--from-storage names the earlier study's database: give --from too")
    if not name:
        return None
    started = warm_start.recorded_from(cfg)
    if started is not None:
        if started != name:
            get("autotune").warning(
                f"this study started from {started}: --from {name} is ignored",
                hint="a warm start is read once; give a new --study to start from another",
            )
        return None
    from autotune.config import absolute_sqlite

    url = absolute_sqlite(storage_url, Path.cwd()) if storage_url else None
    return warm_start.checked(cfg, name, url)


def _record_earlier(cfg: Any, checked: Any) -> None:
    """Write on the new study where it starts from (once)."""
    from autotune.log import get
    from autotune.search import study as st
    from autotune.search import warm_start

    study, where = checked
    declared = st.best_trials(study)
    earlier = warm_start.of_study(cfg, study, where, declared[0] if declared else None)
    st.record_warm_start_once(st.open_study(cfg), earlier)
    best = earlier.best
    get("autotune").info(
        "starting from an earlier study",
        study=earlier.name,
        measured=len(earlier.measured),
        best=None if best is None else best.config,
        best_value=None if best is None else round(best.value, 1),
        differs=sorted(earlier.differences) or "nothing",
    )


def _status(args: argparse.Namespace) -> int:
    from autotune.commands import status

    return status.show(_load(args), as_json=args.json)


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
    from autotune.commands import best

    return best.show(_load(args), as_json=args.json)


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
    from autotune.run import deployment, host_check

    worst = 0
    for cfg in _each_worker(_load(args)):
        if not args.check:
            print(deployment.apply_trial(cfg, args.trial).sentence(cfg))
            continue
        handover, check = host_check.check_trial(cfg, args.trial)
        print(check.sentence(cfg))
        print(handover.sentence(cfg))
        if not check.holds:
            worst = host_check.DOES_NOT_HOLD
    return worst


def _restore(args: argparse.Namespace) -> int:
    from autotune.run import deployment

    for cfg in _each_worker(_load(args)):
        print(deployment.restore_original(cfg).sentence(cfg))
    return 0


def _export_adaptive(args: argparse.Namespace) -> int:
    from autotune.commands import export_adaptive

    return export_adaptive.run(_load(args), Path(args.out) if args.out else None, args.measure)


def _dashboard(args: argparse.Namespace) -> int:
    from autotune.commands import dashboard

    return dashboard.serve(_load(args), args.port)


def _report(args: argparse.Namespace) -> int:
    from autotune.report import build_report

    print(build_report(_load(args), args.out))
    return 0
