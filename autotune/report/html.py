"""The report as one self-contained HTML page: inline CSS, plots as data URIs, no scripts.

Every value from the study passes through `esc`: trial attributes hold text
that came from a server's log.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.report.data import LevelBest, StudyData, TrialRow, schedule, short
from autotune.report.units import UnitDiff
from autotune.search import objective, perf
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


@dataclass(frozen=True)
class Plots:
    best_so_far: str | None
    throughput: str | None
    capacity: str | None
    load_phase: str | None = None


@dataclass(frozen=True)
class Page:
    data: StudyData
    plots: Plots
    diff: UnitDiff | None
    flags: Callable[[Mapping[str, Any]], str]
    """The launch flags of a config, as they appear in the unit."""
    workload: str
    """What the workload sends, in words."""
    generated: str
    adaptive: list[dict[str, Any]] | None = None
    """Static vs adaptive per level (`export_adaptive.comparison`); None: not such a space."""
    adaptive_export: Mapping[str, Any] | None = None
    adaptive_probes: Mapping[str, Any] | None = None
    load_phases: Mapping[str, Mapping[str, Any]] | None = None
    """Label -> changing-load phase (`commands/phase_summary.phases`)."""
    fixed_level_winner: int | None = None
    """The finalist the fixed levels preferred, when it did not hold up under changing load."""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def render(page: Page) -> str:
    d = page.data
    parts = [
        _head(f"autotune report: {d.name}"),
        f"<h1>autotune report: study <code>{esc(d.name)}</code></h1>",
        _summary(page),
        _schedule(page),
        _plot(
            "best-so-far",
            "Best so far",
            page.plots.best_so_far,
            "The objective value of every finished trial and the best feasible value after it. "
            "Grey marks are infeasible trials (triangles on the floor: not benchmarked); "
            "hollow circles repeat an earlier trial's result.",
        ),
        _plot(
            "throughput",
            "Output throughput against each knob",
            page.plots.throughput,
            "One row per concurrency level; every benchmarked trial. The star is the best "
            "feasible config at that level, the green ring the baseline.",
        ),
        _plot(
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
        _rates(page),
        _load_phase(page),
        _adaptive(page),
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


def _section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{esc(title)}</h2>{body}</section>'


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
            f"{esc(n)} = {_num(v)}"
            for n, v in zip(d.metric_names, winner.values or (), strict=False)
        )
        body += (
            f"<p>The study's best feasible trial is <b>trial {winner.number}</b> ({values}): "
            f"<code>{esc(page.flags(winner.config))}</code>. "
            "<code>autotune apply</code> deploys it.</p>" + _vs_baseline(d, winner)
        )
        body += _validation(d)
    return _section("summary", "Summary", body)


def _validation(d: StudyData) -> str:
    if not d.validation:
        return ""
    rows = []
    for n, v in sorted(d.validation.items(), key=lambda kv: -float(kv[1].get("estimate", 0))):
        mark = " (declared best)" if n == d.declared_best else ""
        values = ", ".join(_num(float(x)) for x in v.get("values", []))
        first = _num(v.get("first")) if v.get("first") is not None else ""
        chance = "failed again" if v.get("failed") else _chance(v.get("p_best"))
        rows.append(
            [
                esc(f"{n}{mark}"),
                f"<code>{esc(_config_text(d.trial(n).config))}</code>"
                if any(t.number == n for t in d.trials)
                else "",
                _cell_num(first),
                _cell_num(values),
                _cell_num(_num(v.get("estimate"))),
                _cell_num(esc(chance)),
            ]
        )
    head = ["trial", "config", "trial's value", "measured again", "estimate", "P(best)"]
    return (
        "<p>The top configs were measured again, interleaved, when the budget was spent, "
        "round after round until the leader was the best (or within 1 % of it) with 95 % "
        "probability. Each is judged on everything measured: its own runs and its "
        "neighbours', with its first value, which is what put it in the top, counted as "
        "the noisier one:</p>" + _table(head, rows)
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
        f"{_num(w.value)} tok/s (95 %: {_num(w.low)} … {_num(w.high)})"
    )
    base = d.baseline
    if h.gain is not None and h.baseline is not None and base is not None:
        text += (
            f", {esc(h.gain.text())} against the baseline (trial {base.number}, "
            f"{_num(h.baseline.value)} tok/s over {h.baseline.deployments})"
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
        + _table(head, body_rows)
        + (f"<p>Their launch flags:</p><pre>{esc(flags)}</pre>" if flags else "")
    )
    return _section("schedule", "Which config wins at which load", body)


def _schedule_row(page: Page, r: LevelBest) -> list[str]:
    t = r.trial
    if t is None:
        blank = [""] * (len(page.data.knobs) + 6)
        return [str(r.concurrency), '<span class="bad">no feasible trial</span>', *blank]
    ttft = f"{_num(r.level('ttft_ms_p50'))} / {_num(r.level('ttft_ms_p99'))}"
    accept = r.level("accept_length")
    return [
        _cell_num(r.concurrency),
        esc(t.number),
        *[_cell_num(t.config.get(k, "")) for k in page.data.knobs],
        _cell_num(_num(r.tok_s)),
        _cell_num(_pct(r.gain) if r.gain is not None else "—"),
        _cell_num(ttft),
        _cell_num(_num(r.level("itl_ms_p50"))),
        _cell_num(_num(accept, 2) if accept is not None else "—"),
        _cell_num(t.max_running_requests if t.max_running_requests is not None else "—"),
    ]


def _plot(sid: str, title: str, uri: str | None, caption: str) -> str:
    if uri is None:
        return _section(sid, title, '<p class="note">Nothing to plot yet.</p>')
    img = f'<img src="{uri}" alt="{esc(title)}">'
    return _section(sid, title, f'<p class="note">{esc(caption)}</p><figure>{img}</figure>')


def _winner_unit(diff: UnitDiff | None) -> str:
    title = "The winning unit file"
    if diff is None:
        return _section("winner-unit", title, '<p class="note">No feasible trial yet.</p>')
    intro = (
        f"<p>The winner's unit ({esc(diff.winner_source)}) against the original, what the "
        f"server ran before the study ({esc(diff.original_source)}).</p>"
    )
    if not diff.lines:
        return _section(
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
    return _section("winner-unit", title, intro + '<pre class="diff">' + "".join(out) + "</pre>")


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
    return _section("settings", "Workload and measurement", body + "</table>")


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
        return _section("infeasible", "Infeasible trials", "<p>None: every trial was feasible.</p>")
    head = ["trial", "config", "failure", "reason", "violated constraints", "result of"]
    body_rows = [
        [
            esc(t.number),
            f"<code>{esc(_config_text(t.config))}</code>",
            esc(t.failure or ""),
            esc(t.reason or ""),
            esc(", ".join(f"{k} +{_num(v, 2)}" for k, v in t.violated.items())),
            esc(f"trial {t.reused_from}" if t.reused_from is not None else ""),
        ]
        for t in rows
    ]
    intro = (
        "<p>Configs the server refused, crashed on, or ran with too little capacity or too "
        "slow a latency. Each is a finished trial with a violated constraint, so the sampler "
        "learns to avoid it.</p>"
    )
    return _section("infeasible", "Infeasible trials", intro + _table(head, body_rows))


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
                f"<code>{esc(_config_text(t.config))}</code>",
                esc(", ".join(f"c={c}" for c in after) + _STAGE.get(p.get("when", ""), "")),
                esc(", ".join(_num(t.throughput.get(c)) for c in after)),
                _cell_num(_num(p.get("estimate"))),
                esc(f"trial {p.get('incumbent')}: {_num(p.get('incumbent_value'))}"),
                _cell_num(f"{float(p.get('p_beat') or 0.0):.2%}"),
            ]
        )
    intro = (
        "<p>Trials stopped after some of their levels: with what they measured and what the "
        "level models predict for the rest, beating the best trial was implausible (under "
        f"{100 * PRUNE_BELOW:g} %). The sampler learns from the expected value; none of them "
        "can be declared best or be a finalist.</p>"
    )
    return _section("pruned", "Pruned trials", intro + _table(head, body_rows))


def _predictions(page: Page) -> str:
    """Predicted before deploying against measured, for every deployed config."""
    d = page.data
    status = d.performance_model
    rows = [t for t in d.trials if t.prediction is not None and t.measured]
    if not status and not rows:
        text = "<p>Nothing predicted yet: no config was proposed by the GP sampler.</p>"
        return _section("predictions", "Predicted before deploying", text)
    state = f"<p>The performance model was {esc(perf.describe(status))}.</p>"
    head = ["trial", "config", "predicted tok/s", "measured", "error", "accept length: "
            "predicted", "measured", "max_running_requests: predicted", "measured"]  # fmt: skip
    body_rows = []
    for t in rows:
        p = t.prediction or {}
        value = t.values[0] if t.values and t.state == "COMPLETE" else None
        error = _pct(value / float(p["value"]) - 1.0) if value and p.get("value") else "—"
        accepts = [lv["accept_length"] for lv in t.levels.values() if lv.get("accept_length")]
        accepts = accepts or [
            lv["server_accept_length"] for lv in t.levels.values() if lv.get("server_accept_length")
        ]
        body_rows.append(
            [
                esc(t.number),
                f"<code>{esc(_config_text(t.config))}</code>",
                _cell_num(_num(p.get("value"))),
                _cell_num(_num(value)),
                _cell_num(error),
                _cell_num(_with_sd(p.get("accept_length"), p.get("accept_length_sd"))),
                _cell_num(_num(sum(accepts) / len(accepts), 2) if accepts else "—"),
                _cell_num(_num(p.get("max_running_requests"))),
                _cell_num(_num(t.max_running_requests, 0)),
            ]
        )
    intro = (
        state + "<p>What the model predicted for each config before the sampler chose it "
        "(capacity from the engine's memory rule, accept length from acceptance per position, "
        "step cost from the levels measured), against what the deployment then measured.</p>"
    )
    return _section("predictions", "Predicted before deploying", intro + _table(head, body_rows))


def _load_phase(page: Page) -> str:
    """The finalists and exported configs through the changing-load phase."""
    phases = page.load_phases or {}
    if not phases:
        return ""
    first = next(iter(phases.values()))
    levels = " → ".join(str(c) for c in first.get("levels") or ())
    segment = first.get("segment_s")
    head = ["config", "tok/s through the phase", "tok/s per segment (steady part)",
            "tier switches (at steady load, per min)", "stalled streams", "verdict"]  # fmt: skip
    rows = []
    for label, p in phases.items():
        segs = " · ".join(
            f"c={s['concurrency']}: {s['output_throughput']:.0f}" for s in p.get("segments") or ()
        )
        per_min = p.get("switches_per_min_steady")
        switches = f"{len(p.get('switches') or ())}" + (
            f" ({per_min:g}/min)" if per_min is not None else ""
        )
        verdict = (
            '<span class="good">held up</span>'
            if p.get("held_up")
            else '<span class="bad">did not hold up</span>: '
            + esc("; ".join(p.get("problems") or ()))
        )
        rows.append(
            [
                esc(label),
                _cell_num(_num(p.get("output_throughput"))),
                esc(segs),
                _cell_num(switches),
                _cell_num(_num(p.get("stalls"))),
                verdict,
            ]
        )
    intro = (
        f"<p>A closed loop whose client count steps across the levels and back (c = {esc(levels)}, "
        f"{esc(segment)} s each) in the same deployment as a finalist's first re-measurement "
        "or an exported config's measurement, so that a config or schedule that breaks where the "
        "load changes shows it. A config does not hold up when a stream stalls or fails, when "
        "its speculation tier flaps at a steady load (SGLang's <code>Switch adaptive runtime "
        "state</code> lines), or when a segment serves under 0.8x its fixed level.</p>"
    )
    if page.fixed_level_winner is not None:
        intro += (
            f'<p class="bad">The fixed-level winner, trial {page.fixed_level_winner}, did not '
            "hold up: the study declared the most likely best of the finalists that did.</p>"
        )
    plot = (
        f'<img alt="throughput and latency through the phase" src="{page.plots.load_phase}">'
        '<p class="note">Throughput and median TTFT per bin; dashed lines where the load '
        "changes, ticks on the top where the server switched tier.</p>"
        if page.plots.load_phase
        else ""
    )
    return _section("load-phase", "Under changing load", intro + plot + _table(head, rows))


#: Trials shown in the goodput table (feasible ones, best first).
RATE_TRIALS = 8


def _rates(page: Page) -> str:
    """Goodput per offered rate: the trials side by side, then the winner's rates in full."""
    d = page.data
    shown = [t for t in d.trials if t.rates and t.reused_from is None]
    if not shown:
        return ""
    shown.sort(key=lambda t: (not t.feasible, -(t.values[0] if t.values else 0.0)))
    shown = shown[:RATE_TRIALS]
    offered = sorted({float(r["rate"]) for t in shown for r in t.rates})
    slo = next((r.get("slo") for t in shown for r in t.rates if r.get("slo")), "")
    head = ["trial", "config", *[f"{r:g}/s" for r in offered], "highest rate meeting SLOs"]
    rows = []
    for t in shown:
        by_rate = {float(r["rate"]): r for r in t.rates}
        cells = []
        for rate in offered:
            r = by_rate.get(rate)
            if r is None:
                cells.append(_cell_num("not run"))
                continue
            mark = "" if r.get("meets_slo") else " ✗"
            share = float(r.get("good_share") or 0.0)
            cells.append(_cell_num(f"{float(r['goodput']):.2f} ({share:.0%}){mark}"))
        meeting = objective.highest_meeting(t.rates)
        rows.append(
            [
                esc(t.number) + ("" if t.feasible else " (infeasible)"),
                f"<code>{esc(_config_text(t.config))}</code>",
                *cells,
                _cell_num(f"{meeting:g}/s" if meeting else "none"),
            ]
        )
    intro = (
        "<p>Open-loop levels: requests arrive at each rate (arrivals "
        f"<code>{esc(shown[0].rates[0].get('arrivals'))}</code>) whether or not earlier ones "
        f"finished. Each cell is goodput, requests per second served within the SLOs "
        f"({esc(slo)}), and the share of the rate's requests that were good; ✗ marks a rate "
        "whose good share fell below the attainment target or that left requests unserved. "
        "A rate above one a config missed is not measured (“not run”).</p>"
    )
    body = intro + _table(head, rows)
    winner = d.winner
    if winner is not None and winner.rates:
        detail_head = ["rate", "good/s", "good", "done/s", "output tok/s", "TTFT ms p50 / p99",
                       "TPOT ms p50 / p99", "in flight mean / max", "queued max",
                       "notes"]  # fmt: skip
        detail = [
            [
                _cell_num(f"{float(r['rate']):g}/s"),
                _cell_num(_num(r.get("goodput"), 2)),
                _cell_num(f"{r.get('good')}/{r.get('sent')}"),
                _cell_num(_num(r.get("request_throughput"), 2)),
                _cell_num(_num(r.get("output_throughput"))),
                _cell_num(f"{_num(r.get('ttft_ms_p50'), 0)} / {_num(r.get('ttft_ms_p99'), 0)}"),
                _cell_num(f"{_num(r.get('tpot_ms_p50'))} / {_num(r.get('tpot_ms_p99'))}"),
                _cell_num(f"{_num(r.get('in_flight_mean'))} / {_num(r.get('in_flight_max'))}"),
                _cell_num(_num(r.get("queued_max"))),
                esc("; ".join(r.get("notes") or ())),
            ]
            for r in winner.rates
        ]
        body += (
            f"<p>The best trial ({winner.number}) at each rate: queued is what was in flight "
            "above the server's running-request slots, waiting rather than decoding.</p>"
            + _table(detail_head, detail)
        )
    return _section("rates", "Goodput per rate", body)


def _with_sd(value: Any, sd: Any) -> str:
    """`3.84 ± 0.25`: a prediction with its standard deviation, when it has one."""
    text = _num(value, 2)
    return f"{text} ± {sd:.2f}" if isinstance(sd, (int, float)) and sd > 0 and text != "—" else text


def _adaptive(page: Page) -> str:
    rows = page.adaptive
    if not rows:
        return ""
    names = {"static": "static", "adaptive": "adaptive (study)", "default": "SGLang default",
             "exported": "exported"}  # fmt: skip
    head = ["level", "static winner (steps)", "best adaptive trial (candidates)",
            "SGLang's default adaptive", "exported adaptive", "best"]  # fmt: skip
    body = []
    for r in rows:
        scored = {k: r[k] for k in names if r[k] is not None}
        best = names[max(scored, key=lambda k: scored[k])] if scored else "—"
        static = "—" if r["static"] is None else f"{_num(r['static'])} ({r['static_steps']})"
        adaptive = (
            "—" if r["adaptive"] is None else f"{_num(r['adaptive'])} ({r['adaptive_candidates']})"
        )
        body.append(
            [
                esc(f"c={r['concurrency']}"),
                _cell_num(static),
                _cell_num(adaptive),
                _cell_num(_num(r["default"])),
                _cell_num(_num(r["exported"])),
                esc(best),
            ]
        )
    intro = (
        "<p>Output tok/s per concurrency level: the best static chain (topk 1) the study "
        "measured there, the best adaptive trial, SGLang's built-in adaptive config, and the "
        "config <code>autotune export-adaptive</code> built from the static winners (each "
        "batch-size range runs its level's winner). Adaptive configs reserve memory for their "
        "largest candidate, so they may run fewer requests at once.</p>"
    )
    export = page.adaptive_export or {}
    probes = page.adaptive_probes or {}
    extra = ""
    if export.get("config"):
        extra += "<p>Exported config:</p><pre>" + esc(json.dumps(export["config"])) + "</pre>"
    for label, probe in probes.items():
        extra += (
            f"<p class=note>{esc(label)}: max_running_requests "
            f"{esc(probe.get('max_running_requests'))}, value {_num(probe.get('value'))}"
            + (f", {esc(probe.get('reason'))}" if probe.get("reason") else "")
            + "</p>"
        )
    if not probes:
        extra += (
            "<p class=note>Run <code>autotune export-adaptive --measure</code> to measure the "
            "exported config.</p>"
        )
    return _section(
        "adaptive", "Static or adaptive speculation", intro + _table(head, body) + extra
    )


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
                *[_cell_num(t.config.get(k, "")) for k in d.knobs],
                *[_cell_num(_num(v)) for v in (t.values or [None] * len(d.metric_names))],
                *[_cell_num(_num(t.throughput.get(c))) for c in d.concurrency],
                _cell_num("—" if t.value_ci is None else f"{t.value_ci:.1%}"),
                _cell_num(t.max_running_requests if t.max_running_requests is not None else "—"),
                _feasible_cell(t),
                esc(", ".join(note)),
            ]
        )
    return _section("trials", "All finished trials", _table(head, rows))


def _table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(_td(c) for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def _td(cell: str) -> str:
    return cell if cell.startswith("<td") else f"<td>{cell}</td>"


def _cell_num(value: Any) -> str:
    return f'<td class="num">{esc(value)}</td>'


def _config_text(config: Mapping[str, Any]) -> str:
    return " ".join(f"{k.removeprefix('speculative_')}={v}" for k, v in config.items())


def _num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"
