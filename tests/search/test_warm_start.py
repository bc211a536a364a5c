"""`autotune start --from STUDY`: an earlier study read as evidence, through the real CLI,
the real simulator and real SQLite; and the four refusals, each one line and exit 2."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import FrozenTrial

from autotune.config import load_config
from autotune.search import records, warm_start
from autotune.search import study as st
from autotune.search.pruning import agreement
from autotune.testservers.landscape import Cell, landscape
from tests.helpers.daemon import Daemon
from tests.helpers.e2e import REPO, autotune, status, study_dir
from tests.helpers.modelled import run_study


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

    # The traffic moved: once the baseline is measured, the earlier winner is not queued,
    # and the study runs as a cold one would.
    study = optuna.load_study(study_name="second", storage=f"sqlite:///{tmp_path / 'study.db'}")
    record = study.user_attrs[records.STUDY_WARM_START]
    first_best = autotune("best", "--json", "--config", str(first), cwd=tmp_path)
    assert record["best"]["trial"] == json.loads(first_best.stdout)["trial"]
    assert record["check"]["holds"] is False, record
    assert record["check"]["why"] == "what differs: workload"
    assert record["check"]["trial"] == 0 and record["queued"] == []
    assert not [t for t in study.trials if t.user_attrs.get(records.WARM_FROM)]
    assert "the world moved since the earlier study: what differs: workload" in text.stdout
    assert s["warm_start"]["check"]["holds"] is False

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


def _earlier_baseline(value: float, ci: float | None = 0.02, **server: int) -> dict[str, object]:
    m = {"config": {"steps": 3}, "value": value, "ci": ci, "server": server, "trial": 0}
    return {"measured": [m], "differences": {}}


def _here(value: float, ci: float | None = 0.02, **server: int) -> FrozenTrial:
    """The new study's measured baseline."""
    attrs = {records.CONFIG: {"steps": 3}, records.VALUE_CI: ci, **server}
    return optuna.trial.create_trial(value=value, user_attrs=attrs)


def test_the_earlier_study_holds_where_its_baseline_measures_the_same_here() -> None:
    record = _earlier_baseline(200.0, max_total_num_tokens=400_000)
    same = warm_start.check(record, _here(210.0, max_total_num_tokens=401_000), agreement)
    assert same.holds and "+5.0 %, within ±6.2 %" in same.why
    assert "its winner goes first" in same.sentence()


def test_the_world_moved_where_the_baseline_or_the_servers_pool_differ() -> None:
    record = _earlier_baseline(200.0, max_total_num_tokens=400_000)
    slower = warm_start.check(record, _here(186.0), agreement)  # -7 %: another workload, say
    assert not slower.holds and "-7.0 %, beyond ±6.2 %" in slower.why
    assert "this study runs cold" in slower.sentence()
    # As fast, on a machine with another KV pool (other GPUs, another memory fraction).
    pool = warm_start.check(record, _here(200.0, max_total_num_tokens=300_000), agreement)
    # Both windows at ±2 %: the two agree within ±6.2 %.
    assert agreement(0.02, 0.02) == pytest.approx(0.0622, abs=1e-4)
    assert not pool.holds and "max_total_num_tokens 300000 here, 400000 there" in pool.why


def test_a_declared_difference_moves_the_world_whatever_the_baseline_says() -> None:
    # llama-server's baseline drafts nothing: it measures about the same on copy as on
    # natural text, where the speculating configs are another landscape.
    record = {**_earlier_baseline(200.0), "differences": {"workload": {"earlier": "natural"}}}
    verdict = warm_start.check(record, _here(200.0), agreement)
    assert not verdict.holds and verdict.why == "what differs: workload"
    # A baseline the earlier study never measured holds only where nothing differs.
    assert warm_start.check({"measured": [], "differences": {}}, _here(200.0), agreement).holds


def test_the_earlier_points_steer_only_once_the_check_held() -> None:
    assert not warm_start.checked_holds({"from": "a"})  # the baseline not measured yet
    assert warm_start.checked_holds({"queued": [], "check": {"holds": True}})
    assert not warm_start.checked_holds({"queued": [], "check": {"holds": False}})
    # A study from before the check queued at once: it goes on as it started.
    assert warm_start.checked_holds({"queued": [{"steps": 1}]})


NATURAL = Cell("sglang-eagle", "qwen3.5-122b-a10b-mtp", "natural", "geomean")
GREEDY = Cell("sglang-eagle", "qwen3.5-122b-a10b-mtp", "greedy", "geomean")


def _record_of(cell: Cell, seed: int, now: Cell) -> dict[str, Any]:
    """A study of 6 deployments on `cell`, read as `start --from` reads it for `now`."""
    study, _ = run_study(cell, 6, seed)
    declared = st.best_trials(study)
    cfg = landscape(now).cfg
    return warm_start.of_study(cfg, study, "in memory", declared[0]).record()


def test_where_the_world_moved_the_warm_study_deploys_what_the_cold_one_does() -> None:
    record = _record_of(NATURAL, 1, GREEDY)
    assert record["differences"] == {"workload": {"earlier": "natural", "now": "greedy"}}
    _, cold = run_study(GREEDY, 8, 2)
    warm_study, warm = run_study(GREEDY, 8, 2, earlier=record)
    verdict = warm_study.user_attrs[records.STUDY_WARM_START]["check"]
    assert verdict == {"holds": False, "why": "what differs: workload", "trial": 0}
    assert warm.deployed == cold.deployed
    assert not [t for t in warm_study.trials if t.user_attrs.get(records.WARM_FROM)]


def test_where_it_holds_the_earlier_winner_goes_right_after_the_baseline() -> None:
    record = _record_of(NATURAL, 1, NATURAL)
    study, server = run_study(NATURAL, 3, 2, earlier=record)
    verdict = study.user_attrs[records.STUDY_WARM_START]["check"]
    assert verdict["holds"] and "within" in verdict["why"], verdict
    assert server.deployed[0] != record["best"]["config"]  # the baseline
    assert server.deployed[1] == record["best"]["config"]
    assert study.trials[1].user_attrs.get(records.WARM_FROM)
