"""The report's plots, drawn with matplotlib's Agg canvas and embedded as PNG data URIs.

`Figure` objects are used directly rather than pyplot: no global figure state,
no GUI backend to pick, nothing left open between reports.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from autotune.report.data import (
    StudyData,
    TrialRow,
    best_so_far,
    knob_values,
    schedule,
    short,
)

DPI = 100
WIDTH_IN = 10.0
FEASIBLE = "#1f77b4"
INFEASIBLE = "#9e9e9e"
BEST = "#d62728"
BASELINE = "#2ca02c"


def png_data_uri(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def best_so_far_plot(data: StudyData) -> str | None:
    """Every trial's objective value and the best feasible one after each trial."""
    if not data.trials:
        return None
    fig = Figure(figsize=(WIDTH_IN, 3.6))
    ax = fig.add_subplot()
    numbers = [t.number for t in data.trials]
    several = len(data.metric_names) > 1
    for i, (name, series) in enumerate(zip(data.metric_names, best_so_far(data), strict=True)):
        color = f"C{i}" if several else FEASIBLE
        feasible = [t for t in data.trials if t.feasible and t.values is not None]
        infeasible = [t for t in data.trials if not t.feasible and t.values is not None]
        measured = [t for t in feasible if t.reused_from is None]
        reused = [t for t in feasible if t.reused_from is not None]
        ax.scatter(
            [t.number for t in measured],
            [t.values[i] for t in measured],  # type: ignore[index]
            color=color,
            s=28,
            zorder=3,
            label=f"{name}: feasible trial" if several else "feasible trial",
        )
        if reused:
            ax.scatter(
                [t.number for t in reused],
                [t.values[i] for t in reused],  # type: ignore[index]
                facecolors="none",
                edgecolors=color,
                s=28,
                zorder=3,
                label="same config as an earlier trial (result reused)" if i == 0 else None,
            )
        # Unusable configs score 0 tok/s; drawn on the axis floor they would squash the
        # differences between feasible configs to a flat line.
        scored = [t for t in infeasible if t.values[i] > 0]  # type: ignore[index]
        unscored = [t for t in infeasible if t.values[i] <= 0]  # type: ignore[index]
        if scored:
            ax.scatter(
                [t.number for t in scored],
                [t.values[i] for t in scored],  # type: ignore[index]
                marker="x",
                color=INFEASIBLE,
                s=28,
                zorder=2,
                label="infeasible trial" if i == 0 else None,
            )
        if unscored and i == 0:
            ax.scatter(
                [t.number for t in unscored],
                [0.03] * len(unscored),
                transform=ax.get_xaxis_transform(),
                marker="v",
                color=INFEASIBLE,
                s=28,
                clip_on=False,
                zorder=2,
                label="infeasible, not benchmarked (0 tok/s)",
            )
        ax.step(
            numbers,
            [float("nan") if v is None else v for v in series],
            where="post",
            color=color,
            linewidth=2,
            label=f"best feasible {name}" if several else "best feasible so far",
        )
    base = data.baseline
    if base is not None and base.feasible and base.values is not None and not several:
        ax.axhline(base.values[0], color=BASELINE, linestyle=":", label="baseline (trial 0)")
    ax.set_xlabel("trial")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(data.metric_names[0] if not several else "output tok/s")
    ax.set_title("Best feasible value after each trial")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return png_data_uri(fig)


def throughput_plot(data: StudyData) -> str | None:
    """Output tok/s against each knob, one row per concurrency level."""
    measured = [t for t in data.trials if t.measured]
    if not measured or not data.knobs:
        return None
    rows, cols = len(data.concurrency), len(data.knobs)
    fig = Figure(figsize=(WIDTH_IN, 2.6 * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, sharey="row")
    winners = {row.concurrency: row.trial for row in schedule(data)}
    for r, c in enumerate(data.concurrency):
        at_c = [t for t in measured if c in t.throughput]
        for k, knob in enumerate(data.knobs):
            ax = axes[r][k]
            _points(ax, at_c, knob, lambda t, c=c: t.throughput[c], winners.get(c))
            if r == rows - 1:
                ax.set_xlabel(short(knob))
            if k == 0:
                ax.set_ylabel(f"output tok/s\nat concurrency {c}")
    _legend(fig, with_best="best feasible at this concurrency")
    fig.suptitle("Output throughput against each knob, per concurrency level")
    return png_data_uri(fig)


def capacity_plot(data: StudyData) -> str | None:
    """The max_running_requests each deployed config left, against the capacity constraint."""
    deployed = [t for t in data.trials if t.deployed and t.max_running_requests is not None]
    if not deployed or not data.knobs:
        return None
    cols = len(data.knobs)
    fig = Figure(figsize=(WIDTH_IN, 3.0), layout="constrained")
    axes = fig.subplots(1, cols, squeeze=False, sharey="row")[0]
    floor = data.min_running_requests
    for k, knob in enumerate(data.knobs):
        ax = axes[k]
        _points(ax, deployed, knob, lambda t: t.max_running_requests, None)
        if floor is not None:
            ax.axhline(floor, color=BEST, linestyle="--", linewidth=1.5)
            ax.axhspan(0, floor, color=BEST, alpha=0.06)
        ax.set_xlabel(short(knob))
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("max_running_requests")
    extra = [("line", f"min_running_requests = {floor} (constraint)")] if floor is not None else []
    _legend(fig, with_best=None, extra=extra)
    fig.suptitle("Requests the server can run at once, against each knob")
    return png_data_uri(fig)


def load_phase_plot(phases: Mapping[str, Mapping[str, Any]]) -> str | None:
    """Throughput and median TTFT through the changing-load phase, one line per config, the
    load changes as dashed lines and each config's tier switches as ticks along the top."""
    shown = {k: p for k, p in phases.items() if p.get("bins")}
    if not shown:
        return None
    fig = Figure(figsize=(WIDTH_IN, 5.2))
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    first = next(iter(shown.values()))
    seg = float(first["segment_s"])
    for i, (label, p) in enumerate(shown.items()):
        color = f"C{i}"
        bins = p["bins"]
        width = float(p["segment_s"]) / max(1, len(bins) // max(1, len(p["levels"])))
        xs = [float(b["t_s"]) + width / 2 for b in bins]
        top.plot(xs, [b["tok_s"] for b in bins], color=color, label=label, lw=1.6)
        ttft = [(x, b["ttft_ms_p50"]) for x, b in zip(xs, bins, strict=True) if b["ttft_ms_p50"]]
        if ttft:
            bottom.plot(*zip(*ttft, strict=True), color=color, lw=1.2, marker=".", ms=3)
        switches = [float(s[0]) for s in p.get("switches") or ()]
        if switches:
            top.plot(switches, [1.0 - 0.03 * i] * len(switches), "|", color=color, ms=8,
                     transform=top.get_xaxis_transform())  # fmt: skip
    for n, c in enumerate(first["levels"]):
        for ax in (top, bottom):
            ax.axvline(n * seg, color="#999", ls="--", lw=0.8)
        top.text(n * seg + seg / 2, 1.04, f"c={c}", transform=top.get_xaxis_transform(),
                 ha="center", fontsize=9)  # fmt: skip
    top.set_ylabel("output tok/s")
    top.set_ylim(bottom=0)
    bottom.set_ylabel("TTFT p50 (ms)")
    bottom.set_xlabel("seconds into the phase")
    top.legend(loc="lower center", fontsize=8, ncols=min(4, len(shown)))
    return png_data_uri(fig)


def _points(ax: Axes, trials: Sequence[TrialRow], knob: str, y: Any, best: TrialRow | None) -> None:
    values = knob_values(trials, knob)
    categorical = any(isinstance(v, str) for v in values)

    def x(t: TrialRow) -> Any:
        v = t.config.get(knob)
        return values.index(v) if categorical else v

    shown = [t for t in trials if knob in t.config]
    for group, style in (
        ([t for t in shown if t.feasible], {"color": FEASIBLE, "s": 24, "alpha": 0.8}),
        ([t for t in shown if not t.feasible], {"color": INFEASIBLE, "marker": "x", "s": 24}),
    ):
        if group:
            ax.scatter([x(t) for t in group], [y(t) for t in group], zorder=3, **style)
    base = next((t for t in shown if t.baseline), None)
    if base is not None:
        ax.scatter([x(base)], [y(base)], s=110, facecolors="none", edgecolors=BASELINE, zorder=4)
    if best is not None and knob in best.config:
        ax.scatter([x(best)], [y(best)], marker="*", s=160, color=BEST, zorder=5)
    if categorical:
        ax.set_xticks(range(len(values)), [str(v) for v in values])
    elif (
        values
        and all(isinstance(v, int) and v > 0 for v in values)
        and max(values) >= 8 * min(values)
    ):
        # Draft-token counts span 2..64: on a linear axis the small values crowd together.
        ax.set_xscale("log", base=2)
        ax.set_xticks(values, [str(v) for v in values])
        ax.minorticks_off()
    elif values and all(isinstance(v, int) for v in values) and len(values) <= 12:
        ax.set_xticks(values, [str(v) for v in values])
    ax.margins(x=0.08, y=0.12)  # room for the star and the ring at the edges
    ax.grid(alpha=0.3)


def _legend(fig: Figure, *, with_best: str | None, extra: Sequence[tuple[str, str]] = ()) -> None:
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], linestyle="", marker="o", color=FEASIBLE, label="feasible"),
        Line2D([], [], linestyle="", marker="x", color=INFEASIBLE, label="infeasible"),
        Line2D(
            [],
            [],
            linestyle="",
            marker="o",
            markerfacecolor="none",
            markeredgecolor=BASELINE,
            markersize=10,
            label="baseline (trial 0)",
        ),
    ]
    if with_best:
        handles.append(
            Line2D([], [], linestyle="", marker="*", color=BEST, markersize=12, label=with_best)
        )
    for _kind, label in extra:
        handles.append(Line2D([], [], color=BEST, linestyle="--", label=label))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8)
