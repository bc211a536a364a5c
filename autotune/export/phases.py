"""The changing-load phase of the study's best and of exported configs, side by side (text).

The declared best ran the phase as a finalist; `export-adaptive --measure` runs it for
each probe (SGLang's default adaptive config, the exported one, vLLM's schedule).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna

from autotune.search.records import STUDY_FINALISTS as FINALISTS


def phases(
    study: optuna.Study, probes: Mapping[str, Mapping[str, Any]], *, every_finalist: bool = False
) -> dict[str, Any]:
    """Label -> phase record: the declared best's (from its finalist run), with
    `every_finalist` the other finalists' too, then each probe's."""
    out: dict[str, Any] = {}
    record = study.user_attrs.get(FINALISTS) or {}
    best = record.get("declared_best")
    for number, finalist in (record.get("finalists") or {}).items():
        phase = (finalist or {}).get("load_phase")
        if not phase or (str(best) != number and not every_finalist):
            continue
        label = f"declared best (trial {best})" if str(best) == number else f"finalist {number}"
        out[label] = phase
    out = dict(sorted(out.items(), key=lambda kv: not kv[0].startswith("declared best")))
    for label, probe in probes.items():
        if isinstance(probe, Mapping) and probe.get("load_phase"):
            out[label] = probe["load_phase"]
    return out


def table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per config: tok/s through the phase and per segment, switches, verdict."""
    if not rows:
        return "changing-load phase: not measured (benchmark.load_phase: false?)"
    first = next(iter(rows.values()))
    levels = "→".join(str(c) for c in first.get("levels") or ())
    lines = [f"through the changing-load phase (c={levels}, {first.get('segment_s')} s each):"]
    for label, p in rows.items():
        segs = " ".join(f"{s['output_throughput']:.0f}" for s in p.get("segments") or ())
        switches = len(p.get("switches") or ())
        verdict = (
            "held up"
            if p.get("held_up")
            else "DID NOT HOLD UP: " + "; ".join(p.get("problems") or ())
        )
        lines.append(
            f"  {label:<28} {p.get('output_throughput', 0):>8.1f} tok/s  per segment [{segs}]  "
            f"{switches} tier switches  {p.get('stalls', 0)} stalls  {verdict}"
        )
    return "\n".join(lines)
