"""`autotune start --from STUDY`: an earlier study read as evidence, through the real CLI,
the real simulator and real SQLite; and the four refusals, each one line and exit 2."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.config import load_config
from autotune.search import records, warm_start
from autotune.search import study as st
from tests.helpers.daemon import Daemon
from tests.helpers.e2e import REPO, autotune, status, study_dir


def test_first_the_winner_then_what_its_study_could_not_tell_from_it() -> None:
    def m(value: float, ci: float | None, steps: int) -> dict[str, object]:
        return {"config": {"steps": steps}, "value": value, "ci": ci}

    best = m(100.0, 0.05, 1)  # 95 ... 105
    record = {
        "best": best,
        "measured": [best, m(90.0, 0.02, 2), m(96.0, 0.02, 3), m(95.5, None, 4), m(94.0, 0.01, 5)],
    }
    assert warm_start.first_configs(record, 3) == [{"steps": 1}, {"steps": 3}, {"steps": 4}]
    assert warm_start.first_configs(record, 2) == [{"steps": 1}, {"steps": 3}]
    assert warm_start.first_configs({"best": None, "measured": []}, 3) == []


def _one_line_refusal(proc: object, *words: str) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]  # type: ignore[attr-defined]
    lines = proc.stderr.strip().splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("autotune: error: --from "), line
    for w in words:
        assert w in line, line
    return line


def _second_config(first: Path, workload: str) -> Path:
    data = yaml.safe_load(first.read_text())
    data["study"]["name"] = "second"
    data["benchmark"]["workload"] = workload
    path = first.with_name("second.yaml")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.slow
def test_a_second_study_names_the_first_and_compares_what_both_measured(
    tmp_path: Path,
) -> None:
    first = study_dir(tmp_path, n_trials=4, finalists=2)
    proc = autotune("start", "--config", str(first), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]

    second = _second_config(first, "greedy")
    proc = autotune("start", "--config", str(second), "--from", "e2e", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "starting from an earlier study" in proc.stderr

    s = status(second)
    start = s["warm_start"]
    assert start["from"] == "e2e"
    assert start["differences"] == {"workload": {"earlier": "natural", "now": "greedy"}}
    earlier = {t["number"]: t for t in status(first)["trials"]}
    # Both measured the unit as it is (each study's baseline): earlier value against now.
    baseline = next(r for r in start["compared"] if r["earlier_trial"] == 0)
    assert baseline["earlier"] == pytest.approx(earlier[0]["value"])
    assert baseline["now"] == pytest.approx(s["trials"][0]["value"])

    text = autotune("status", "--config", str(second), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "started from study e2e" in text.stdout
    assert "workload natural -> greedy" in text.stdout

    best = autotune("best", "--json", "--config", str(second), cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    assert json.loads(best.stdout)["warm_start"]["from"] == "e2e"
    best_text = autotune("best", "--config", str(second), cwd=tmp_path)
    assert "started from study e2e" in best_text.stdout

    # Deployed first, right after the baseline: the earlier winner and what its study could
    # not tell from it (the baseline's config is measured as the baseline).
    study = optuna.load_study(study_name="second", storage=f"sqlite:///{tmp_path / 'study.db'}")
    queued = [t for t in study.trials if t.user_attrs.get(records.WARM_FROM)]
    record = study.user_attrs[records.STUDY_WARM_START]
    first_best = autotune("best", "--json", "--config", str(first), cwd=tmp_path)
    assert record["best"]["trial"] == json.loads(first_best.stdout)["trial"]
    wanted = warm_start.first_configs(record, 2)
    assert wanted[0] == record["best"]["config"]
    baseline = st.trial_config(study.trials[0])
    assert [st.trial_config(t) for t in queued] == [c for c in wanted if c != baseline]
    assert [t.number for t in queued] == list(range(1, len(queued) + 1))

    # Resumed (or joined by another worker), it is not checked or recorded again.
    again = autotune("start", "--config", str(second), "--from", "nope", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "this study started from e2e: --from nope is ignored" in again.stderr

    report = autotune("report", "--config", str(second), "--out", str(tmp_path), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "second-report.html").read_text()
    assert "Started from study e2e" in html and "workload natural -&gt; greedy" in html

    # The first study knows nothing of the second.
    assert status(first)["warm_start"] is None


@pytest.mark.slow
def test_the_four_refusals(tmp_path: Path) -> None:
    first = study_dir(tmp_path, n_trials=2)
    proc = autotune("start", "--config", str(first), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    args = ("start", "--config", str(first), "--study", "new")

    # A study that does not exist: the line says which exist (and --n-trials, which writes
    # the budget on the new study, creates nothing either).
    proc = autotune(*args, "--n-trials", "5", "--from", "nope", cwd=tmp_path)
    assert "no study named" in _one_line_refusal(proc, "nope", "e2e")
    # A database that does not exist.
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    _one_line_refusal(
        autotune(*args, "--from", "e2e", "--from-storage", missing, cwd=tmp_path), "missing.db"
    )
    # The study itself.
    _one_line_refusal(
        autotune("start", "--config", str(first), "--from", "e2e", cwd=tmp_path), "itself"
    )
    # Another space: the same engine over sglang-eagle.yaml.
    data = yaml.safe_load(first.read_text())
    data["search_space"] = "sglang-eagle.yaml"
    data["study"]["name"] = "eagle"
    eagle = first.with_name("eagle.yaml")
    eagle.write_text(yaml.safe_dump(data, sort_keys=False))
    _one_line_refusal(
        autotune("start", "--config", str(eagle), "--from", "e2e", cwd=tmp_path),
        "another space",
    )
    # Another engine: a llama.cpp study in the same database (opened as `start` opens one).
    llama = load_config(REPO / "examples" / "llamacpp-local.yaml")
    llama = replace(
        llama, study=replace(llama.study, name="llama", storage=data["study"]["storage"])
    )
    st.open_study(llama)
    _one_line_refusal(autotune(*args, "--from", "llama", cwd=tmp_path), "llama.cpp", "sglang")
    # A refusal creates nothing: there is no study "new".
    proc = autotune("status", "--config", str(first), "--study", "new", cwd=tmp_path)
    assert proc.returncode != 0 and "no study named 'new'" in proc.stderr


@pytest.mark.slow
def test_a_study_whose_worker_runs_is_refused(tmp_path: Path) -> None:
    first = study_dir(tmp_path, n_trials=20, sim_flags="--sim-load-time 3")
    daemon = Daemon("--config", str(first), cwd=tmp_path)
    try:
        daemon.wait_for("deploying", timeout=60)
        proc = autotune(
            "start", "--config", str(first), "--study", "new", "--from", "e2e", cwd=tmp_path
        )
        _one_line_refusal(proc, "still running")
    finally:
        daemon.signal(15)
        daemon.proc.wait(timeout=60)


def _record(values: dict[int, float]) -> dict[str, object]:
    return {"measured": [{"config": {"steps": k}, "value": v} for k, v in values.items()]}


def test_before_any_config_measured_in_both_the_earlier_points_carry_the_prior() -> None:
    p = warm_start.prior(_record({1: 100.0, 2: 120.0}), [])
    assert (p.offset, p.pairs) == (0.0, 0)
    assert p.disagreement == pytest.approx(warm_start.PRIOR_DISAGREEMENT)
    assert [(c, v) for c, v, _ in p.points] == [
        ({"steps": 1}, pytest.approx(math.log(100.0))),
        ({"steps": 2}, pytest.approx(math.log(120.0))),
    ]


def test_a_world_uniformly_faster_keeps_the_earlier_ranking_at_full_weight() -> None:
    earlier = _record({1: 100.0, 2: 120.0, 3: 90.0, 4: 130.0})
    now = [({"steps": 1}, 110.0), ({"steps": 2}, 132.0), ({"steps": 3}, 99.0)]
    p = warm_start.prior(earlier, now)
    assert p.pairs == 3 and p.offset == pytest.approx(math.log(1.1))
    # Nothing left once the offset is taken out: the prior alone, over two degrees of freedom.
    assert p.disagreement == pytest.approx(warm_start.PRIOR_DISAGREEMENT / math.sqrt(3))
    # Only the config the new study has not measured, moved by the offset.
    assert [(c, v) for c, v, _ in p.points] == [({"steps": 4}, pytest.approx(math.log(143.0)))]


def test_a_world_that_moved_weighs_the_earlier_points_down_to_its_disagreement() -> None:
    earlier = _record({1: 100.0, 2: 100.0, 3: 100.0, 4: 100.0, 5: 100.0})
    e = math.exp
    now = [({"steps": k}, 100.0 * e(0.2 if k % 2 else -0.2)) for k in (1, 2, 3, 4)]
    p = warm_start.prior(earlier, now)
    assert p.offset == pytest.approx(0.0, abs=1e-12)
    want = math.sqrt((warm_start.PRIOR_DISAGREEMENT**2 + 4 * 0.2**2) / 4)
    assert p.disagreement == pytest.approx(want)
    assert p.disagreement > 0.2  # a hundred times less weight than a 2 % measurement
