"""`autotune best`: the declared best, what it is worth over its deployments, its gain over
the unit as it was, the flags to run it, and its figures per level."""

from __future__ import annotations

import json
from typing import Any

from autotune.config import Config
from autotune.errors import AutotuneError
from autotune.run import loop
from autotune.search import deployments, warm_start, workers
from autotune.search import study as st


def show(cfg: Config, *, as_json: bool = False) -> int:
    """Print the declared best (its worth, gain, flags and per-level figures, or JSON)."""
    study = st.open_study(cfg, create=False)
    best = st.best_trials(study)
    if not best:
        raise AutotuneError(f"study {study.study_name!r} has no feasible trial yet")
    described = [loop.describe(study, t) for t in best]
    start = warm_start.summary(study)
    if start is not None:
        for d in described:
            d["warm_start"] = start
    if as_json:
        print(json.dumps(described[0] if len(described) == 1 else described, indent=2))
        return 0
    for w in workers.liveness(study, cfg):
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
    for line in warm_start.sentences(study):
        print(line)
    return 0


def _value_text(cfg: Any, study: Any, t: Any, base: Any) -> list[str]:
    """`283.2 tok/s (geomean over c=1,16,64), 95 % 276.1 … 290.4 over 3 deployments,
    +14.7 % (+9.1 … +20.6) over the unit as it was (trial 0: ...)`, and the spread between
    deployments that interval comes from: never a gain from one lucky draw."""
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
