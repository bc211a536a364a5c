"""`autotune report`: read the study, draw, render, write one HTML file."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

from autotune.bench.workload import load_workload
from autotune.config import Config
from autotune.errors import AutotuneError, ConfigError
from autotune.export import phases, sglang_adaptive
from autotune.log import get
from autotune.report import data as report_data
from autotune.report import plots
from autotune.report.html import render
from autotune.report.page import Page, Plots
from autotune.report.units import TrialFiles, unit_diff
from autotune.search import records
from autotune.search import study as st
from autotune.store.storage import sqlite_file

# A report is drawn on servers without a display; never let matplotlib look for one.
matplotlib.use("Agg")

log = get("autotune.report")


def build_report(cfg: Config, out_dir: str | Path) -> Path:
    """Write `<out_dir>/<study name>-report.html` and return its path."""
    db = sqlite_file(cfg.study.storage)
    if db is not None and not db.is_file():
        # Opening it would create an empty database where the user mistyped a path.
        raise AutotuneError(f"no study database at {db} (run `autotune start` first)")
    study = st.open_study(cfg, create=False)
    data = report_data.load(cfg, study)
    probes = study.user_attrs.get(records.STUDY_ADAPTIVE_PROBES) or {}
    load_phases = phases.phases(study, probes, every_finalist=True)
    page = Page(
        data=data,
        plots=Plots(
            best_so_far=plots.best_so_far_plot(data),
            throughput=plots.throughput_plot(data),
            capacity=plots.capacity_plot(data),
            load_phase=plots.load_phase_plot(load_phases),
        ),
        diff=unit_diff(cfg, data, TrialFiles(study, cfg.study.storage)),
        flags=lambda config: _flags(cfg, config),
        workload=_workload_text(data.settings),
        generated=dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        adaptive=_adaptive_rows(cfg, study),
        adaptive_export=study.user_attrs.get(records.STUDY_ADAPTIVE_EXPORT),
        adaptive_probes=study.user_attrs.get(records.STUDY_ADAPTIVE_PROBES),
        load_phases=load_phases,
        fixed_level_winner=(study.user_attrs.get(records.STUDY_FINALISTS) or {}).get(
            "fixed_level_winner"
        ),
    )
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{_safe(data.name)}-report.html"
        path.write_text(render(page), encoding="utf-8")
    except OSError as exc:
        raise AutotuneError(f"cannot write the report in {out}: {exc.strerror}") from None
    log.info("report written", path=str(path), trials=len(data.trials))
    return path


def _adaptive_rows(cfg: Config, study: Any) -> list[dict[str, Any]] | None:
    try:
        sglang_adaptive.knobs(cfg)
    except ConfigError:
        return None  # not a static-vs-adaptive space
    return sglang_adaptive.comparison(cfg, study)


def _flags(cfg: Config, config: Mapping[str, Any]) -> str:
    known = {k: v for k, v in config.items() if k in cfg.space.params}
    if not known or not cfg.space.complete(known):
        return "(the unit file's own flags)"
    return cfg.space.describe(known)


def _workload_text(settings: Mapping[str, Any]) -> str:
    b = settings.get("benchmark", {})
    name = str(b.get("workload", ""))
    try:
        return load_workload(name, max_tokens=int(b.get("max_tokens", 256))).description
    except (ConfigError, OSError, ValueError):
        return name  # a prompt file that has moved since: its name says enough


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) or "study"
