"""The report's sections on load that moves: the finalists' changing-load phase, the
open-loop request rates, and adaptive speculation against the static winner."""

from __future__ import annotations

import json

from autotune.report.page import (
    Page,
    cell_num,
    config_text,
    esc,
    num,
    section,
    table,
)
from autotune.search import objective


def load_phase(page: Page) -> str:
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
                cell_num(num(p.get("output_throughput"))),
                esc(segs),
                cell_num(switches),
                cell_num(num(p.get("stalls"))),
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
    return section("load-phase", "Under changing load", intro + plot + table(head, rows))


#: Trials shown in the goodput table (feasible ones, best first).
RATE_TRIALS = 8


def rates(page: Page) -> str:
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
                cells.append(cell_num("not run"))
                continue
            mark = "" if r.get("meets_slo") else " ✗"
            share = float(r.get("good_share") or 0.0)
            cells.append(cell_num(f"{float(r['goodput']):.2f} ({share:.0%}){mark}"))
        meeting = objective.highest_meeting(t.rates)
        rows.append(
            [
                esc(t.number) + ("" if t.feasible else " (infeasible)"),
                f"<code>{esc(config_text(t.config))}</code>",
                *cells,
                cell_num(f"{meeting:g}/s" if meeting else "none"),
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
    body = intro + table(head, rows)
    winner = d.winner
    if winner is not None and winner.rates:
        detail_head = ["rate", "good/s", "good", "done/s", "output tok/s", "TTFT ms p50 / p99",
                       "TPOT ms p50 / p99", "in flight mean / max", "queued max",
                       "notes"]  # fmt: skip
        detail = [
            [
                cell_num(f"{float(r['rate']):g}/s"),
                cell_num(num(r.get("goodput"), 2)),
                cell_num(f"{r.get('good')}/{r.get('sent')}"),
                cell_num(num(r.get("request_throughput"), 2)),
                cell_num(num(r.get("output_throughput"))),
                cell_num(f"{num(r.get('ttft_ms_p50'), 0)} / {num(r.get('ttft_ms_p99'), 0)}"),
                cell_num(f"{num(r.get('tpot_ms_p50'))} / {num(r.get('tpot_ms_p99'))}"),
                cell_num(f"{num(r.get('in_flight_mean'))} / {num(r.get('in_flight_max'))}"),
                cell_num(num(r.get("queued_max"))),
                esc("; ".join(r.get("notes") or ())),
            ]
            for r in winner.rates
        ]
        body += (
            f"<p>The best trial ({winner.number}) at each rate: queued is what was in flight "
            "above the server's running-request slots, waiting rather than decoding.</p>"
            + table(detail_head, detail)
        )
    return section("rates", "Goodput per rate", body)


def adaptive(page: Page) -> str:
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
        static = "—" if r["static"] is None else f"{num(r['static'])} ({r['static_steps']})"
        adaptive = (
            "—" if r["adaptive"] is None else f"{num(r['adaptive'])} ({r['adaptive_candidates']})"
        )
        body.append(
            [
                esc(f"c={r['concurrency']}"),
                cell_num(static),
                cell_num(adaptive),
                cell_num(num(r["default"])),
                cell_num(num(r["exported"])),
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
            f"{esc(probe.get('max_running_requests'))}, value {num(probe.get('value'))}"
            + (f", {esc(probe.get('reason'))}" if probe.get("reason") else "")
            + "</p>"
        )
    if not probes:
        extra += (
            "<p class=note>Run <code>autotune export-adaptive --measure</code> to measure the "
            "exported config.</p>"
        )
    return section("adaptive", "Static or adaptive speculation", intro + table(head, body) + extra)
