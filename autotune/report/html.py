"""The report as one self-contained HTML page: inline CSS, plots as data URIs, no scripts.

Every value from the study passes through `esc`: trial attributes hold text
that came from a server's log.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from autotune.report import html_load
from autotune.report.data import LevelBest, StudyData, TrialRow, schedule, short
from autotune.report.page import (
    Page,
    cell_num,
    config_text,
    esc,
    num,
    pct,
    plot,
    section,
    table,
    with_sd,
)
from autotune.report.units import UnitDiff
from autotune.search import perf
from autotune.search.pruning import PRUNE_BELOW

#: Section ids, in page order (tests and links rely on them).
SECTIONS = (
    "summary",
    "schedule",
    "best-so-far",
    "throughput",
    "capacity",
    "winner-unit",
    "settings",
    "infeasible",
    "predictions",
    "trials",
)


def render(page: Page) -> str:
    d = page.data
    parts = [
        _head(f"autotune report: {d.name}"),
        f"<h1>autotune report: study <code>{esc(d.name)}</code></h1>",
        _summary(page),
        _schedule(page),
        plot(
            "best-so-far",
            "Best so far",
            page.plots.best_so_far,
            "The objective value of every finished trial and the best feasible value after it. "
            "Grey marks are infeasible trials (triangles on the floor: not benchmarked); "
            "hollow circles repeat an earlier trial's result.",
        ),
        plot(
            "throughput",
            "Output throughput against each knob",
            page.plots.throughput,
            "One row per concurrency level; every benchmarked trial. The star is the best "
            "feasible config at that level, the green ring the baseline.",
        ),
        plot(
            "capacity",
            "max_running_requests against each knob",
            page.plots.capacity,
            "What each deployed config left the server: speculation costs KV cache and "
            f"running requests. Below the dashed line (min_running_requests = "
            f"{d.min_running_requests}) a config is infeasible."
            if d.min_running_requests is not None
            else "What each deployed config left the server (no capacity constraint was set).",
        ),
        _winner_unit(page.diff),
        _settings(page),
        html_load.rates(page),
        html_load.load_phase(page),
        html_load.adaptive(page),
        _infeasible(page),
        _pruned(page),
        _predictions(page),
        _all_trials(page),
        "</main></body></html>",
    ]
    return "\n".join(parts)


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#222;margin:0;
background:#fafafa}
main{max-width:1060px;margin:0 auto;padding:16px 24px 48px;background:#fff}
h1{font-size:22px;margin:8px 0 4px}h2{font-size:18px;margin:28px 0 8px;
border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f2f4f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
pre{background:#f6f8fa;border:1px solid #e1e4e8;padding:8px;overflow-x:auto}
pre.diff span{display:block}pre.diff .add{background:#e6ffec}pre.diff .del{background:#ffebe9}
pre.diff .hunk{color:#6f42c1}
img{max-width:100%;height:auto}.note{color:#555}.bad{color:#b42318}.good{color:#067647}
.kpi{display:inline-block;margin:4px 18px 4px 0}.kpi b{font-size:18px;display:block}
"""


def _head(title: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body><main>"
    )


def _summary(page: Page) -> str:
    d = page.data
    deployed = sum(t.deployed for t in d.trials)
    reused = sum(t.reused_from is not None for t in d.trials)
    kpis = [
        ("finished trials", f"{len(d.trials)} of {d.n_trials}"),
        ("servers deployed", deployed),
        ("results reused", reused),
        ("feasible", sum(t.feasible for t in d.trials)),
        ("infeasible", len(d.infeasible)),
    ]
    if d.pruned:
        kpis.append(("pruned (stopped early)", len(d.pruned)))
    predicted = sum(t.predicted and t.reused_from is None for t in d.trials)
    if predicted:
        kpis.append(("ruled out by prediction", predicted))
    kpis += [(f"{state.lower()} (not counted)", n) for state, n in sorted(d.unfinished.items())]
    body = "".join(f'<span class="kpi"><b>{esc(v)}</b>{esc(k)}</span>' for k, v in kpis)
    spent = f"{esc(d.time)}; " if d.time else ""
    body += (
        f'<p class="note">Time: {spent}storage <code>{esc(d.storage)}</code>; '
        f"generated {esc(page.generated)}.</p>"
    )
    if d.warm_start:
        head, *compared = d.warm_start
        items = "".join(f"<li>{esc(line.strip())}</li>" for line in compared)
        body += f'<p class="note">{esc(head[0].upper() + head[1:])}.</p>'
        body += f"<ul>{items}</ul>" if items else ""
    for worker in d.workers:
        css = "bad" if "STALE" in worker else "note"
        body += f'<p class="{css}">Worker: {esc(worker)}</p>'
    if d.rehearsal_speedup:
        body += (
            f'<p class="bad"><b>A rehearsal</b> on the simulated server, run '
            f"{d.rehearsal_speedup:g}x faster than real time: throughput and latencies are in "
            "real-server units; wall-clock times are the rehearsal's own.</p>"
        )
    winner = d.winner
    if winner is None:
        body += '<p class="bad"><b>No feasible trial yet</b>: nothing to apply.</p>'
    elif len(d.metric_names) > 1:
        body += (
            "<p>One objective per concurrency level, so no single best: the Pareto front "
            "(no other trial is better at every level) is trials "
            f"<b>{esc(', '.join(str(n) for n in d.best))}</b>. The table below says which "
            "wins at which load; <code>autotune apply --trial N</code> deploys one.</p>"
        )
    else:
        values = ", ".join(
            f"{esc(n)} = {num(v)}"
            for n, v in zip(d.metric_names, winner.values or (), strict=False)
        )
        body += (
            f"<p>The study's best feasible trial is <b>trial {winner.number}</b> ({values}): "
            f"<code>{esc(page.flags(winner.config))}</code>. "
            "<code>autotune apply</code> deploys it.</p>" + _vs_baseline(d, winner)
        )
        body += _validation(d)
    return section("summary", "Summary", body)


def _validation(d: StudyData) -> str:
    if not d.validation:
        return ""
    rows = []
    for n, v in sorted(d.validation.items(), key=lambda kv: -float(kv[1].get("estimate", 0))):
        mark = " (declared best)" if n == d.declared_best else ""
        values = ", ".join(num(float(x)) for x in v.get("values", []))
        first = num(v.get("first")) if v.get("first") is not None else ""
        chance = "failed again" if v.get("failed") else _chance(v.get("p_best"))
        rows.append(
            [
                esc(f"{n}{mark}"),
                f"<code>{esc(config_text(d.trial(n).config))}</code>"
                if any(t.number == n for t in d.trials)
                else "",
                cell_num(first),
                cell_num(values),
                cell_num(num(v.get("estimate"))),
                cell_num(esc(chance)),
            ]
        )
    head = ["trial", "config", "trial's value", "measured again", "estimate", "P(best)"]
    return (
        "<p>The top configs were measured again, interleaved, when the budget was spent, "
        "round after round until the leader was the best (or within 1 % of it) with 95 % "
        "probability. Each is judged on everything measured: its own runs and its "
        "neighbours', with its first value, which is what put it in the top, counted as "
        "the noisier one:</p>" + table(head, rows)
    )


def _chance(p: Any) -> str:
    return f"{100 * float(p):.0f} %" if isinstance(p, (int, float)) else ""


def _vs_baseline(d: StudyData, t: TrialRow) -> str:
    """Its worth over its deployments and its gain over the baseline, each with its 95 %
    interval, and the spread between deployments both come from: never one draw."""
    h = d.headline
    if h is None or t.number not in d.best:
        return ""
    w = h.worth
    text = (
        f"<p>Over its {w.deployments} deployment{'s' if w.deployments != 1 else ''}: "
        f"{num(w.value)} tok/s (95 %: {num(w.low)} … {num(w.high)})"
    )
    base = d.baseline
    if h.gain is not None and h.baseline is not None and base is not None:
        text += (
            f", {esc(h.gain.text())} against the baseline (trial {base.number}, "
            f"{num(h.baseline.value)} tok/s over {h.baseline.deployments})"
        )
    return text + f". Deployed again, one config varies by {esc(h.spread.text())}.</p>"


def _schedule(page: Page) -> str:
    d = page.data
    rows = schedule(d)
    head = [
        "concurrency",
        "best trial",
        *[short(k) for k in d.knobs],
        "output tok/s",
        "vs baseline",
        "TTFT p50 / p99 ms",
        "ITL p50 ms",
        "accept length",
        "max running",
    ]
    body_rows = [_schedule_row(page, r) for r in rows]
    flags = "\n".join(
        f"concurrency {r.concurrency:>4}: {page.flags(r.trial.config)}"
        for r in rows
        if r.trial is not None
    )
    body = (
        "<p>The best feasible config at each concurrency level: what to run at which load. "
        "The summary's winner is the best single config for all of them; where the rows "
        "differ, the load decides.</p>"
        + table(head, body_rows)
        + (f"<p>Their launch flags:</p><pre>{esc(flags)}</pre>" if flags else "")
    )
    return section("schedule", "Which config wins at which load", body)


def _schedule_row(page: Page, r: LevelBest) -> list[str]:
    t = r.trial
    if t is None:
        blank = [""] * (len(page.data.knobs) + 6)
        return [str(r.concurrency), '<span class="bad">no feasible trial</span>', *blank]
    ttft = f"{num(r.level('ttft_ms_p50'))} / {num(r.level('ttft_ms_p99'))}"
    accept = r.level("accept_length")
    return [
        cell_num(r.concurrency),
        esc(t.number),
        *[cell_num(t.config.get(k, "")) for k in page.data.knobs],
        cell_num(num(r.tok_s)),
        cell_num(pct(r.gain) if r.gain is not None else "—"),
        cell_num(ttft),
        cell_num(num(r.level("itl_ms_p50"))),
        cell_num(num(accept, 2) if accept is not None else "—"),
        cell_num(t.max_running_requests if t.max_running_requests is not None else "—"),
    ]


def _winner_unit(diff: UnitDiff | None) -> str:
    title = "The winning unit file"
    if diff is None:
        return section("winner-unit", title, '<p class="note">No feasible trial yet.</p>')
    intro = (
        f"<p>The winner's unit ({esc(diff.winner_source)}) against the original, what the "
        f"server ran before the study ({esc(diff.original_source)}).</p>"
    )
    if not diff.lines:
        return section(
            "winner-unit", title, intro + "<p>The winner is the original unit, unchanged.</p>"
        )
    out = []
    for line in diff.lines:
        cls = "ctx"
        if line.startswith("@@"):
            cls = "hunk"
        elif line.startswith("+") and not line.startswith("+++"):
            cls = "add"
        elif line.startswith("-") and not line.startswith("---"):
            cls = "del"
        # The newline inside the block span keeps the text copyable without doubling lines.
        out.append(f'<span class="{cls}">{esc(line)}\n</span>')
    return section("winner-unit", title, intro + '<pre class="diff">' + "".join(out) + "</pre>")


def _settings(page: Page) -> str:
    s = page.data.settings
    b, o = s.get("benchmark", {}), s.get("objective", {})
    study, target = s.get("study", {}), s.get("target", {})
    lv = page.data.level_sample
    workload = esc(page.workload)
    if b.get("workload") == "greedy" or (lv.get("ignore_eos") and lv.get("temperature") == 0):
        workload += (
            ' <span class="bad">(greedy with ignore_eos: repetitive output inflates '
            "acceptance; an upper bound, not what users see)</span>"
        )
    warmup = b.get("warmup_requests")
    measure = (
        f"{b.get('min_duration')}-{b.get('max_duration')} s of steady state, stopping once the "
        f"95 % CI is within ±{b.get('ci_width')}; warmup requests: "
        + ("one per slot" if warmup is None else str(warmup))
    )
    objective = f"{o.get('mode')}"
    if o.get("level") is not None:
        objective += f" at concurrency {o.get('level')}"
    objective += f" ({', '.join(page.data.metric_names)}), maximised"
    constraints = {k: v for k, v in (o.get("constraints") or {}).items() if v is not None}
    sampler_notes = [
        f"seed {study.get('seed')}" if study.get("seed") is not None else "no seed",
        f"{study.get('startup_trials')} startup trials"
        if study.get("startup_trials") is not None
        else "the sampler's own startup trials",
    ]
    sampler = f"{study.get('sampler')} ({', '.join(sampler_notes)})"
    where = (
        f"{target.get('engine')} via {target.get('deploy')}: unit {target.get('unit')} "
        f"at {target.get('base_url')}"
    )
    rows = [
        ("workload", workload),
        ("endpoint", esc(b.get("endpoint", ""))),
        ("max output tokens", esc(b.get("max_tokens", ""))),
        ("concurrency levels", esc(", ".join(str(c) for c in b.get("concurrency", [])))),
        ("measurement per level", esc(measure)),
        ("steady-state window", esc(_window(lv))),
        ("token counts from", esc(lv.get("usage_source", "—"))),
        ("sampling", esc(_sampling(lv))),
        ("objective", esc(objective)),
        ("constraints", esc(json.dumps(constraints) if constraints else "none")),
        ("search space", esc(s.get("search_space", ""))),
        ("sampler", esc(sampler)),
        ("target", esc(where)),
    ]
    body = "<table>" + "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return section("settings", "Workload and measurement", body + "</table>")


def _window(level: Mapping[str, Any]) -> str:
    if "window" not in level:
        return "—"
    return f"at concurrency {level.get('concurrency')}: {level['window']}"


def _sampling(level: Mapping[str, Any]) -> str:
    if "temperature" not in level:
        return "—"
    eos = (
        "ignore_eos (every request runs to max tokens)"
        if level.get("ignore_eos")
        else ("stops at end of sequence")
    )
    return f"temperature {level['temperature']}, {eos}"


def _infeasible(page: Page) -> str:
    rows = page.data.infeasible
    if not rows:
        return section("infeasible", "Infeasible trials", "<p>None: every trial was feasible.</p>")
    head = ["trial", "config", "failure", "reason", "violated constraints", "result of"]
    body_rows = [
        [
            esc(t.number),
            f"<code>{esc(config_text(t.config))}</code>",
            esc(t.failure or ""),
            esc(t.reason or ""),
            esc(", ".join(f"{k} +{num(v, 2)}" for k, v in t.violated.items())),
            esc(f"trial {t.reused_from}" if t.reused_from is not None else ""),
        ]
        for t in rows
    ]
    intro = (
        "<p>Configs the server refused, crashed on, or ran with too little capacity or too "
        "slow a latency. Each is a finished trial with a violated constraint, so the sampler "
        "learns to avoid it.</p>"
    )
    return section("infeasible", "Infeasible trials", intro + table(head, body_rows))


def _feasible_cell(t: TrialRow) -> str:
    if t.pruned is not None:
        return "pruned"
    return '<span class="good">yes</span>' if t.feasible else '<span class="bad">no</span>'


#: How the last measured level of a pruned trial ended, when not in full.
_STAGE = {"its window so far": " (cut short)", "one run, before a second": " (one run)"}


def _pruned(page: Page) -> str:
    rows = page.data.pruned
    if not rows:
        return ""
    head = ["trial", "config", "levels measured", "tok/s there", "expected value", "best then",
            "chance to beat it"]  # fmt: skip
    body_rows = []
    for t in rows:
        p = t.pruned or {}
        after = [int(c) for c in p.get("after_levels") or []]
        body_rows.append(
            [
                esc(t.number),
                f"<code>{esc(config_text(t.config))}</code>",
                esc(", ".join(f"c={c}" for c in after) + _STAGE.get(p.get("when", ""), "")),
                esc(", ".join(num(t.throughput.get(c)) for c in after)),
                cell_num(num(p.get("estimate"))),
                esc(f"trial {p.get('incumbent')}: {num(p.get('incumbent_value'))}"),
                cell_num(f"{float(p.get('p_beat') or 0.0):.2%}"),
            ]
        )
    intro = (
        "<p>Trials stopped after some of their levels: with what they measured and what the "
        "level models predict for the rest, beating the best trial was implausible (under "
        f"{100 * PRUNE_BELOW:g} %). The sampler learns from the expected value; none of them "
        "can be declared best or be a finalist.</p>"
    )
    return section("pruned", "Pruned trials", intro + table(head, body_rows))


def _predictions(page: Page) -> str:
    """Predicted before deploying against measured, for every deployed config."""
    d = page.data
    status = d.performance_model
    rows = [t for t in d.trials if t.prediction is not None and t.measured]
    if not status and not rows:
        text = "<p>Nothing predicted yet: no config was proposed by the GP sampler.</p>"
        return section("predictions", "Predicted before deploying", text)
    state = f"<p>The performance model was {esc(perf.describe(status))}.</p>"
    head = ["trial", "config", "predicted tok/s", "measured", "error", "accept length: "
            "predicted", "measured", "max_running_requests: predicted", "measured"]  # fmt: skip
    body_rows = []
    for t in rows:
        p = t.prediction or {}
        value = t.values[0] if t.values and t.state == "COMPLETE" else None
        error = pct(value / float(p["value"]) - 1.0) if value and p.get("value") else "—"
        accepts = [lv["accept_length"] for lv in t.levels.values() if lv.get("accept_length")]
        accepts = accepts or [
            lv["server_accept_length"] for lv in t.levels.values() if lv.get("server_accept_length")
        ]
        body_rows.append(
            [
                esc(t.number),
                f"<code>{esc(config_text(t.config))}</code>",
                cell_num(num(p.get("value"))),
                cell_num(num(value)),
                cell_num(error),
                cell_num(with_sd(p.get("accept_length"), p.get("accept_length_sd"))),
                cell_num(num(sum(accepts) / len(accepts), 2) if accepts else "—"),
                cell_num(num(p.get("max_running_requests"))),
                cell_num(num(t.max_running_requests, 0)),
            ]
        )
    intro = (
        state + "<p>What the model predicted for each config before the sampler chose it "
        "(capacity from the engine's memory rule, accept length from acceptance per position, "
        "step cost from the levels measured), against what the deployment then measured.</p>"
    )
    return section("predictions", "Predicted before deploying", intro + table(head, body_rows))


def _all_trials(page: Page) -> str:
    d = page.data
    head = [
        "trial",
        *[short(k) for k in d.knobs],
        *d.metric_names,
        *[f"tok/s @c{c}" for c in d.concurrency],
    ]
    head += ["±95 %", "max running", "feasible", "note"]
    rows = []
    for t in d.trials:
        note = []
        if t.baseline:
            note.append("baseline")
        if t.reused_from is not None:
            note.append(f"= trial {t.reused_from}")
        if t.number in d.best:
            note.append("best")
        if t.uncertain_levels:
            levels = ",".join(str(c) for c in t.uncertain_levels)
            note.append(f"uncertain at c={levels} (missed the confidence target twice)")
        if t.close_constraints:
            p = f", feasible p={t.feasible_p:.2f}" if t.feasible_p is not None else ""
            note.append(f"close call on {', '.join(t.close_constraints)}{p} (measured twice)")
        if t.pruned is not None:
            after = ",".join(str(c) for c in t.pruned.get("after_levels") or [])
            note.append(f"pruned after c={after}")
        if t.predicted:
            note.append("predicted below the running-requests floor, not deployed")
        rows.append(
            [
                esc(t.number),
                *[cell_num(t.config.get(k, "")) for k in d.knobs],
                *[cell_num(num(v)) for v in (t.values or [None] * len(d.metric_names))],
                *[cell_num(num(t.throughput.get(c))) for c in d.concurrency],
                cell_num("—" if t.value_ci is None else f"{t.value_ci:.1%}"),
                cell_num(t.max_running_requests if t.max_running_requests is not None else "—"),
                _feasible_cell(t),
                esc(", ".join(note)),
            ]
        )
    return section("trials", "All finished trials", table(head, rows))
