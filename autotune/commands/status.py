"""`autotune status`: the study's trials, its workers and the time left, as a table or JSON.

Each trial's row says what a person needs to judge it at a glance: its state and value, the
value's interval, why it failed or was pruned, and whether it is the one `best` names.
"""

from __future__ import annotations

import json
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from autotune.config import Config
from autotune.deploy.local_process import leftover_server
from autotune.run import eta
from autotune.run.deployment import state_dir
from autotune.run.finalists import validation_of
from autotune.search import estimate, perf, records, warm_start, workers
from autotune.search import study as st
from autotune.store.storage import redact


def show(cfg: Config, *, as_json: bool = False) -> int:
    """Print the study's state (a table, or JSON with `as_json`); 0."""
    study = st.open_study(cfg, create=False)
    rows = [_row(study, t) for t in study.get_trials(deepcopy=False)]
    alive = {w.trial: w for w in workers.liveness(study, cfg)}
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
    if as_json:
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
        body["warm_start"] = warm_start.summary(study)
        print(json.dumps(body, indent=2))
        return 0
    print(
        f"study {study.study_name}: {st.finished_count(study)} of {cfg.study.n_trials} trials "
        f"finished ({redact(cfg.study.storage)})"
    )
    for line in warm_start.sentences(study):
        print(line)
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
    print(f"{'#':>4}  {'state':9} {'feasible':8} {unit:>10} {'±95%':>6}  config / reason")
    for r in rows:
        print(_line(r))
    for r in rows:
        if r["progress"]:
            print(f"now: {r['progress']}")
    return 0


def _line(r: dict[str, Any]) -> str:
    """One trial's row of the table: its value and interval, why it failed or stopped."""
    value = (
        ""
        if r["value"] is None
        else (f"{r['value']:.1f}" if isinstance(r["value"], float) else str(r["value"]))
    )
    config = " ".join(
        f"{k.removeprefix('speculative_')}={short(v)}" for k, v in r["config"].items()
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
    return f"{r['number']:>4}  {state:9} {feasible:8} {value:>10} {ci:>6}  {config}{extra}"


def _orphaned_server(cfg: Config, workers: list[Any]) -> str | None:
    """A local server whose worker was killed mid-trial runs on, serving nobody, until the
    next `start` stops it: say so, with how to stop it now."""
    if cfg.target.deploy != "local-process" or not any(w.stale for w in workers):
        return None
    pgid = leftover_server(state_dir(cfg))
    if pgid is None:
        return None
    return (
        f"server: pid {pgid}, started by the worker that is gone, still runs: `autotune "
        f"start` stops it before its next trial, or `kill -- -{pgid}` now"
    )


def short(value: Any) -> str:
    """A knob's value as a person reads it: a float (an enqueued trial's raw fraction) to
    three significant digits."""
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _row(study: optuna.Study, t: FrozenTrial) -> dict[str, Any]:
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
