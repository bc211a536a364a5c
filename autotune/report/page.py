"""The report's page and the pieces every section is built of: the data a page shows, the
escaping every study value passes through, tables, numbers, plots."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.report.data import StudyData
from autotune.report.units import UnitDiff


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
    """Static vs adaptive per level (`sglang_adaptive.comparison`); None: not such a space."""
    adaptive_export: Mapping[str, Any] | None = None
    adaptive_probes: Mapping[str, Any] | None = None
    load_phases: Mapping[str, Mapping[str, Any]] | None = None
    """Label -> changing-load phase (`export/phases.phases`)."""
    fixed_level_winner: int | None = None
    """The finalist the fixed levels preferred, when it did not hold up under changing load."""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{esc(title)}</h2>{body}</section>'


def plot(sid: str, title: str, uri: str | None, caption: str) -> str:
    if uri is None:
        return section(sid, title, '<p class="note">Nothing to plot yet.</p>')
    img = f'<img src="{uri}" alt="{esc(title)}">'
    return section(sid, title, f'<p class="note">{esc(caption)}</p><figure>{img}</figure>')


def with_sd(value: Any, sd: Any) -> str:
    """`3.84 ± 0.25`: a prediction with its standard deviation, when it has one."""
    text = num(value, 2)
    return f"{text} ± {sd:.2f}" if isinstance(sd, (int, float)) and sd > 0 and text != "—" else text


def table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(td(c) for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def td(cell: str) -> str:
    return cell if cell.startswith("<td") else f"<td>{cell}</td>"


def cell_num(value: Any) -> str:
    return f'<td class="num">{esc(value)}</td>'


def config_text(config: Mapping[str, Any]) -> str:
    return " ".join(f"{k.removeprefix('speculative_')}={v}" for k, v in config.items())


def num(value: Any, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def pct(x: float) -> str:
    return f"{x * 100:+.1f} %"
