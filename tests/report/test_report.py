"""`autotune report` on studies written by real runs: the page's structure, plots and numbers."""

from __future__ import annotations

import base64
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.config import Config, load_config
from autotune.errors import AutotuneError
from autotune.report import build_report
from autotune.report.html import SECTIONS
from autotune.search import objective
from autotune.search import study as st
from tests.helpers.e2e import autotune, study_dir

pytestmark = pytest.mark.slow

LEVELS = [1, 8]
# A weak baseline (1 step): the study finds something better, so the winner's unit differs.
BASELINE_FLAGS = (
    "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 2"
)


@dataclass
class Section:
    text: str = ""
    images: list[dict[str, str]] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    """Table rows (header rows included), cell texts."""
    pre: list[str] = field(default_factory=list)


class ReportParser(HTMLParser):
    """Splits the report into its sections: text, images, table rows and <pre> blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: dict[str, Section] = {}
        self.tags: list[str] = []
        self.links: list[str] = []
        self._current: Section | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._pre: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        self.links += [a[k] for k in ("src", "href") if k in a]
        if tag == "section":
            self._current = self.sections.setdefault(a["id"], Section())
        elif self._current is None:
            return
        elif tag == "img":
            self._current.images.append(a)
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "pre":
            self._pre = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._current = None
        elif tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._current is not None and self._row is not None:
            self._current.rows.append(self._row)
            self._row = None
        elif tag == "pre" and self._current is not None and self._pre is not None:
            self._current.pre.append("".join(self._pre))
            self._pre = None

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self._current.text += data
        if self._cell is not None:
            self._cell.append(data)
        if self._pre is not None:
            self._pre.append(data)


def parse(path: Path) -> ReportParser:
    p = ReportParser()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def png_size(uri: str) -> tuple[int, int]:
    prefix = "data:image/png;base64,"
    assert uri.startswith(prefix)
    data = base64.b64decode(uri[len(prefix) :], validate=True)
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def quicker(config: Path, **benchmark: Any) -> None:
    """Change the benchmark settings of a `study_dir` config."""
    data = yaml.safe_load(config.read_text())
    data["benchmark"].update(benchmark)
    config.write_text(yaml.safe_dump(data, sort_keys=False))


@dataclass
class Run:
    config: Path
    cfg: Config
    trials: list[optuna.trial.FrozenTrial]
    report: Path
    page: ReportParser


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """A small study of the demo's shape, by `autotune start` on the real simulator."""
    tmp = tmp_path_factory.mktemp("report")
    config = study_dir(
        tmp,
        space="sglang-eagle.yaml",
        n_trials=6,
        concurrency=LEVELS,
        flags=BASELINE_FLAGS,
        objective={"constraints": {"min_running_requests": 12}},
    )
    # Short windows: this checks the report, not the measurements.
    quicker(config, min_duration=0.5, max_duration=0.5, ci_width=None)
    # The GP from scratch: it deploys configs short of the running-requests floor, whose
    # rows the report must show (the performance model rarely does; its own report rows are
    # checked in tests/search/test_perf_model.py).
    data = yaml.safe_load(config.read_text())
    data["study"]["performance_model"] = False
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = autotune("start", "--config", str(config), cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = load_config(config)
    trials = st.open_study(cfg, create=False).get_trials()
    made = autotune("report", "--config", str(config), "--out", str(tmp / "out"), cwd=tmp)
    assert made.returncode == 0, made.stderr[-3000:]
    report = Path(made.stdout.strip())
    yield Run(config, cfg, trials, report, parse(report))


def test_report_is_one_self_contained_file(run: Run) -> None:
    assert run.report == run.report.parent / "e2e-report.html"
    assert list(run.report.parent.iterdir()) == [run.report]
    assert list(run.page.sections) == list(SECTIONS)
    assert "script" not in run.page.tags and "link" not in run.page.tags
    # Nothing to fetch: every image is inline.
    assert all(link.startswith("data:image/png;base64,") for link in run.page.links)


def test_every_plot_is_there(run: Run) -> None:
    for sid in ("best-so-far", "throughput", "capacity"):
        images = run.page.sections[sid].images
        assert len(images) == 1, sid
        width, height = png_size(images[0]["src"])
        assert width >= 600 and height >= 200, (sid, width, height)
        assert images[0]["alt"]
    # One row of panels per concurrency level: the throughput figure is the tallest.
    heights = {sid: png_size(run.page.sections[sid].images[0]["src"])[1] for sid in SECTIONS[2:5]}
    assert heights["throughput"] > heights["capacity"]
    assert "min_running_requests" in run.page.sections["capacity"].text


def _throughput(t: optuna.trial.FrozenTrial, c: int) -> float | None:
    v = t.user_attrs.get(f"output_tok_s@c{c}")
    return None if v is None else float(v)


# One printed decimal is at most half a unit off; 140.75 prints as 140.8, and 140.8 - 140.75
# is a hair over 0.05 in binary floating point (a clean clone's CI failed on exactly that).
HALF_A_DECIMAL = 0.05 + 1e-9


def test_schedule_names_the_best_feasible_config_per_level(run: Run) -> None:
    rows = run.page.sections["schedule"].rows
    header, body = rows[0], rows[1:]
    assert header[:5] == [
        "concurrency",
        "best trial",
        "num_steps",
        "eagle_topk",
        "num_draft_tokens",
    ]
    assert [int(r[0]) for r in body] == LEVELS
    base = run.trials[0]
    for row, c in zip(body, LEVELS, strict=True):
        measured = [
            t
            for t in run.trials
            if st.is_feasible(t)
            and t.user_attrs.get("reused_from") is None
            and _throughput(t, c) is not None
        ]
        best = max(measured, key=lambda t: (_throughput(t, c), -t.number))
        config = st.trial_config(best)
        assert int(row[1]) == best.number
        assert [int(x) for x in row[2:5]] == [
            config["speculative_num_steps"],
            config["speculative_eagle_topk"],
            config["speculative_num_draft_tokens"],
        ]
        printed = float(row[5].replace(",", ""))
        assert printed == pytest.approx(_throughput(best, c), abs=HALF_A_DECIMAL)
        gain = _throughput(best, c) / _throughput(base, c) - 1  # type: ignore[operator]
        assert float(row[6].split()[0]) == pytest.approx(gain * 100, abs=HALF_A_DECIMAL)
    flags = run.page.sections["schedule"].pre[0]
    assert f"concurrency {LEVELS[0]:>4}: --speculative-num-steps" in flags


def test_winner_unit_is_a_diff_against_the_baseline(run: Run) -> None:
    best = st.best_trials(st.open_study(run.cfg, create=False))[0]
    config = st.trial_config(best)
    assert config["speculative_num_steps"] != 1  # the weak baseline lost
    section = run.page.sections["winner-unit"]
    diff = section.pre[0].splitlines()
    assert diff[0] == "--- original (trial 0, the baseline)"
    assert diff[1] == f"+++ winner (trial {best.number})"
    removed = [ln for ln in diff[2:] if ln.startswith("-")]
    added = [ln for ln in diff[2:] if ln.startswith("+")]
    assert any("--speculative-num-steps 1 " in ln for ln in removed), diff
    steps = config["speculative_num_steps"]
    assert any(f"--speculative-num-steps {steps} " in ln for ln in added), diff
    # Only flags change: every other line of the unit is context.
    assert all("--speculative-" in ln for ln in removed + added), diff
    summary = run.page.sections["summary"].text
    assert f"trial {best.number}" in summary and "against the baseline (trial 0, " in summary
    # The gain with its interval over deployments, and the spread it comes from.
    assert re.search(r"[+-]\d+\.\d% \([+-]\d+\.\d% … [+-]\d+\.\d%\) against", summary), summary
    assert "between deployments" in summary


def test_settings_and_infeasible_trials(run: Run) -> None:
    settings = dict(r for r in run.page.sections["settings"].rows if len(r) == 2)
    assert settings["workload"].startswith("built-in natural prompts")
    assert settings["concurrency levels"] == "1, 8"
    assert settings["max output tokens"] == "64"
    assert settings["sampling"] == "temperature 0.7, stops at end of sequence"
    assert '"min_running_requests": 12' in settings["constraints"]

    infeasible = [t for t in run.trials if not st.is_feasible(t)]
    assert infeasible, "the space's wide trees leave too few running requests"
    rows = run.page.sections["infeasible"].rows[1:]
    assert [int(r[0]) for r in rows] == [t.number for t in infeasible]
    for row, t in zip(rows, infeasible, strict=True):
        assert row[3] == t.user_attrs["reason"]
        assert row[4].startswith("min_running_requests +")

    all_rows = run.page.sections["trials"].rows[1:]
    assert [int(r[0]) for r in all_rows] == [t.number for t in run.trials]


# -- studies without a winner ------------------------------------------------------------------
def _record_refused(study: optuna.Study, cfg: Config, reason: str) -> None:
    trial = study.ask()
    config = cfg.space.decode(cfg.space.suggest(trial))
    score = objective.unusable(cfg.objective, cfg.benchmark.concurrency, server_up=False)
    attrs: dict[str, Any] = {
        "config": config,
        "workload": "natural",
        "failure": "refused",
        "reason": reason,
        "feasible": False,
    }
    st.record(study, trial, score, attrs)


def test_report_without_a_feasible_trial(tmp_path: Path) -> None:
    cfg = load_config(study_dir(tmp_path))
    study = st.open_study(cfg)
    for _ in range(3):
        _record_refused(study, cfg, "ValueError: <b>tree</b> too small & refused")
    page = parse(build_report(cfg, tmp_path / "out"))
    assert list(page.sections) == list(SECTIONS)
    assert "No feasible trial yet" in page.sections["summary"].text
    assert page.sections["best-so-far"].images  # three trials, all on the floor
    for sid in ("throughput", "capacity"):
        assert "Nothing to plot yet" in page.sections[sid].text
    assert "No feasible trial yet" in page.sections["winner-unit"].text
    assert [r[1] for r in page.sections["schedule"].rows[1:]] == ["no feasible trial"] * 2
    reasons = [r[3] for r in page.sections["infeasible"].rows[1:]]
    assert reasons == ["ValueError: <b>tree</b> too small & refused"] * 3
    raw = (tmp_path / "out" / "e2e-report.html").read_text()
    assert "<b>tree</b>" not in raw and "&lt;b&gt;tree&lt;/b&gt; too small &amp; refused" in raw


def test_report_of_a_study_that_does_not_exist(tmp_path: Path) -> None:
    cfg = load_config(study_dir(tmp_path))
    with pytest.raises(AutotuneError, match="no study database"):
        build_report(cfg, tmp_path / "out")
    assert not (tmp_path / "study.db").exists()
    optuna.create_study(study_name="other", storage=cfg.study.storage)
    with pytest.raises(AutotuneError, match="no study named 'e2e'"):
        build_report(cfg, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _record_measured(study: optuna.Study, cfg: Config, tok_s: dict[int, float]) -> int:
    trial = study.ask()
    config = cfg.space.decode(cfg.space.suggest(trial))
    results = {c: {"concurrency": c, "output_throughput": v} for c, v in tok_s.items()}
    score = objective.score(cfg.objective, list(tok_s), results, 20)
    attrs: dict[str, Any] = {
        "config": config,
        "resolved": config,
        "workload": "natural",
        "max_running_requests": 20,
        "levels": list(results.values()),
        **{f"output_tok_s@c{c}": v for c, v in tok_s.items()},
        "feasible": True,
    }
    return st.record(study, trial, score, attrs).number


def test_report_shows_the_finalists_measured_again(tmp_path: Path) -> None:
    cfg = load_config(study_dir(tmp_path))
    study = st.open_study(cfg)
    first = _record_measured(study, cfg, {1: 100.0, 4: 400.0})
    second = _record_measured(study, cfg, {1: 101.0, 4: 404.0})
    study.set_user_attr(
        "finalists",
        {
            "n_trials": 2,
            "declared_best": first,
            "finalists": {
                str(first): {
                    "first": 200.0,
                    "values": [203.0, 201.0],
                    "estimate": 201.6,
                    "p_best": 0.9712,
                    "p_near": 0.99,
                },
                str(second): {"first": 202.0, "values": [190.0], "failed": True},
            },
        },
    )
    page = parse(build_report(cfg, tmp_path / "out"))
    summary = page.sections["summary"]
    assert summary.rows[1][:1] == [f"{first} (declared best)"]
    assert summary.rows[1][2:] == ["200.0", "203.0, 201.0", "201.6", "97 %"]
    assert summary.rows[2][0] == str(second)
    assert summary.rows[2][-1] == "failed again"


def test_report_of_a_pareto_study(tmp_path: Path) -> None:
    cfg = load_config(study_dir(tmp_path, objective={"mode": "pareto"}))
    study = st.open_study(cfg)
    fast_alone = _record_measured(study, cfg, {1: 180.0, 4: 500.0})
    fast_together = _record_measured(study, cfg, {1: 120.0, 4: 700.0})
    _record_measured(study, cfg, {1: 110.0, 4: 450.0})  # dominated
    page = parse(build_report(cfg, tmp_path / "out"))
    summary = page.sections["summary"].text
    assert f"is trials {fast_alone}, {fast_together}." in summary
    assert [r[1] for r in page.sections["schedule"].rows[1:]] == [
        str(fast_alone),
        str(fast_together),
    ]
    assert page.sections["best-so-far"].images
    header = page.sections["trials"].rows[0]
    assert "output_tok_s@c1" in header and "output_tok_s@c4" in header
