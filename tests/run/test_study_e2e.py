"""Whole studies against the real simulator process, through the real CLI and real SQLite."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import yaml

from autotune.search import deployments
from tests.helpers.daemon import Daemon
from tests.helpers.e2e import autotune, status, study_dir

pytestmark = pytest.mark.slow


def test_small_study_end_to_end_and_resume(tmp_path: Path) -> None:
    config = study_dir(tmp_path, n_trials=4)
    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trial 1 of 4" in proc.stderr and "trial 4 of 4" in proc.stderr
    assert "level done" in proc.stderr  # progress a person can watch

    s = status(config)
    trials = s["trials"]
    assert [t["state"] for t in trials] == ["COMPLETE"] * 4
    assert s["metric_names"] == ["geomean_output_tok_s"]
    baseline = trials[0]
    assert baseline["baseline"] is True
    assert baseline["config"]["speculative_num_steps"] == 3
    measured = [t for t in trials if t["reused_from"] is None]
    assert all(t["value"] > 0 for t in measured if t["feasible"])

    best = autotune("best", "--json", "--config", str(config), cwd=tmp_path)
    assert best.returncode == 0, best.stderr
    b = json.loads(best.stdout)
    assert set(b) == {"study", "trial", "params", "resolved", "value", "chosen_by", "metrics"}
    # Named by the GP's model of every measurement, not by the luckiest single benchmark.
    assert b["chosen_by"] == "best by the model of every measurement"
    assert b["value"] in [t["value"] for t in trials if t["feasible"]]
    assert "output_tok_s@c1" in b["metrics"] and "max_running_requests" in b["metrics"]

    # The budget is spent: a second start deploys nothing.
    again = autotune("start", "--config", str(config), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "budget spent" in again.stderr
    assert "deploying" not in again.stderr
    assert len(status(config)["trials"]) == 4

    # Raising the budget continues the same study.
    more = autotune("start", "--config", str(config), "--n-trials", "5", cwd=tmp_path)
    assert more.returncode == 0, more.stderr[-3000:]
    trials = status(config)["trials"]
    assert len(trials) == 5
    assert sum(t["baseline"] for t in trials) == 1


def test_refused_config_is_an_infeasible_trial(tmp_path: Path) -> None:
    # Draft tokens above steps * topk + 1 are refused by the server at startup.
    space = {
        "params": {
            "speculative_num_steps": {"flag": "--speculative-num-steps", "choices": [2]},
            "speculative_eagle_topk": {"flag": "--speculative-eagle-topk", "choices": [2]},
            "speculative_num_draft_tokens": {
                "flag": "--speculative-num-draft-tokens",
                "choices": [4, 9],
            },
        }
    }
    config = study_dir(
        tmp_path,
        space=space,
        n_trials=5,
        sampler="random",
        flags="--speculative-num-steps 2 --speculative-eagle-topk 2 "
        "--speculative-num-draft-tokens 4",
    )
    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = status(config)["trials"]
    refused = [t for t in trials if t["config"].get("speculative_num_draft_tokens") == 9]
    assert refused, trials
    for t in refused:
        assert t["state"] == "COMPLETE"
        assert t["feasible"] is False
        assert t["reason"]
    first = next(t for t in refused if t["reused_from"] is None)
    assert first["failure"] in ("refused", "crash_on_start")
    assert trials[0]["feasible"] is True  # the baseline (draft 4) runs fine


def test_resolved_duplicates_are_not_benchmarked_twice(tmp_path: Path) -> None:
    # With topk 1 SGLang runs steps + 1 draft tokens whatever was asked: (2, 1, 3) == (2, 1, 6).
    space = {
        "params": {
            "speculative_num_steps": {"flag": "--speculative-num-steps", "choices": [2]},
            "speculative_eagle_topk": {"flag": "--speculative-eagle-topk", "choices": [1]},
            "speculative_num_draft_tokens": {
                "flag": "--speculative-num-draft-tokens",
                "choices": [3, 6],
            },
        }
    }
    config = study_dir(
        tmp_path,
        space=space,
        n_trials=4,
        sampler="random",
        flags="--speculative-num-steps 2 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 6",
    )
    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = status(config)["trials"]
    measured = [t for t in trials if t["reused_from"] is None]
    assert len(measured) == 1, trials
    assert measured[0]["config"]["speculative_num_draft_tokens"] == 3  # as the server resolved it
    for t in trials:
        assert t["value"] == measured[0]["value"]
        assert t["feasible"] == measured[0]["feasible"]
    assert proc.stderr.count("benchmarking") + proc.stderr.count("level done") > 0
    assert proc.stderr.count("result reused") == 3


def test_finalists_are_measured_again_and_the_best_is_declared_by_all_measurements(
    tmp_path: Path,
) -> None:
    config = study_dir(tmp_path, n_trials=4, finalists=2)
    data = yaml.safe_load(config.read_text())
    data["benchmark"]["finalist_rounds"] = 2
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "validating finalists" in proc.stderr and "declared best" in proc.stderr

    best = json.loads(autotune("best", "--json", "--config", str(config), cwd=tmp_path).stdout)
    validation = best["metrics"]["validation"]
    assert 1 <= len(validation["values"]) <= 2  # measured again; the trial's own is apart
    assert validation["first"] == pytest.approx(best["value"], abs=0.01)
    assert validation["estimate"] > 0 and 0 < validation["p_best"] <= 1
    validated = [t for t in status(config)["trials"] if t["validation"]]
    assert len(validated) == 2
    # The declared best: the highest 95 % lower bound over each finalist's own deployments
    # (its trial and its runs again), the spread between deployments pooled over them.
    runs = {t["number"]: [t["validation"]["first"], *t["validation"]["values"]] for t in validated}
    unit = next(t for t in status(config)["trials"] if t["baseline"])
    if unit["number"] not in runs:  # the unit as it was, measured beside them
        spread = deployments.pooled([*runs.values(), [unit["value"], *_baseline_runs(config)]])
    else:
        spread = deployments.pooled(runs.values())
    assert best["trial"] == deployments.best_bound(runs, spread)
    # Validation adds measurements, not trials.
    assert len(status(config)["trials"]) == 4
    # Each finalist went through the changing-load phase (c=1, 4, 1) in its first round.
    assert proc.stderr.count("changing-load phase done") == 2
    assert "held_up=True" in proc.stderr, proc.stderr[-3000:]


def _baseline_runs(config: Path) -> list[float]:
    import optuna

    data = yaml.safe_load(config.read_text())
    study = optuna.load_study(study_name=data["study"]["name"], storage=data["study"]["storage"])
    return list((study.user_attrs["finalists"].get("baseline") or {}).get("values") or [])


def test_a_level_that_misses_its_confidence_target_is_measured_again_and_marked(
    tmp_path: Path,
) -> None:
    config = study_dir(tmp_path, n_trials=2)
    data = yaml.safe_load(config.read_text())
    # No 1-second window of a noisy server gets within ±0.05 %.
    data["benchmark"].update(ci_width=0.0005, min_duration=0.5, max_duration=1.0)
    config.write_text(yaml.safe_dump(data))
    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "measuring it again" in proc.stderr

    measured = [t for t in status(config)["trials"] if t["reused_from"] is None and t["feasible"]]
    assert measured
    for t in measured:
        assert t["uncertain_levels"] == [1, 4]
        assert 0 < t["value_ci"] < 1
    text = autotune("status", "--config", str(config), cwd=tmp_path).stdout
    assert "UNCERTAIN at c=1,4" in text

    import optuna

    storage = data["study"]["storage"]
    study = optuna.load_study(study_name=data["study"]["name"], storage=storage)
    for t in study.trials:
        for level in t.user_attrs.get("levels", []):
            assert len(level["attempt_throughputs"]) == 2
            assert level["ci_target_met"] is False
            # Both runs of the level, and every level, drew prompts the trial had not sent,
            # each from a server whose cache was flushed.
            assert level["prompts_repeated"] == 0
            assert level["cache_flush"] == "flushed: POST /flush_cache"


def test_a_second_worker_on_the_same_local_server_is_refused(tmp_path: Path) -> None:
    """Workers of one study are welcome; two driving one local-process server are not."""
    config = study_dir(tmp_path, n_trials=3, sim_flags="--sim-load-time 1")
    first = Daemon("--config", str(config), cwd=tmp_path)
    try:
        first.wait_for("trial 1 of 3")
        second = autotune("start", "--config", str(config), cwd=tmp_path, timeout=60)
        assert second.returncode == 1, second.stderr
        assert "is already driven by pid" in second.stderr
        assert "one worker per server" in second.stderr
        assert str(first.proc.pid) in second.stderr
        assert "Traceback" not in second.stderr
        first.signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 0
    finally:
        first.kill()


def test_start_status_and_report_say_how_long_the_rest_will_take(tmp_path: Path) -> None:
    config = study_dir(tmp_path, n_trials=3, space="sglang-eagle.yaml")
    first = autotune("start", "--config", str(config), "--n-trials", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    # After the baseline: one more trial of this run's two, at the pace of the first.
    assert "time left:" in first.stderr and "1 deployment left at about" in first.stderr
    shown = autotune("status", "--config", str(config), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("time: "))
    assert "spent; budget spent" in line, line  # --n-trials 2 is the study's total now
    report = autotune("report", "--config", str(config), "--out", str(tmp_path), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "Time: " in Path(report.stdout.strip()).read_text()

    # With a deadline too close for the rest, the log says how much of it fits.
    again = autotune(
        "start",
        "--config",
        str(config),
        "--n-trials",
        "40",
        "--max-hours",
        "0.006",  # 22 s: a few trials, each followed by the estimate against the deadline
        cwd=tmp_path,
        timeout=200,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert "before_deadline" in again.stderr
    # Stopped by the deadline: paused, with the budget's trials left (427 configs, most
    # untried).
    timing = status(config)["time"]
    assert timing["paused_since"] is not None and 0 < timing["per_trial_s"] < 60
    finished = [t for t in status(config)["trials"] if t["state"] in ("COMPLETE", "PRUNED")]
    assert timing["remaining"] == 40 - len(finished), timing
    line = autotune("status", "--config", str(config), cwd=tmp_path).stdout
    assert "paused since" in line and "once resumed" in line and "ending about" not in line


def test_relative_sqlite_path_follows_the_config_and_readers_create_nothing(
    tmp_path: Path,
) -> None:
    home = tmp_path / "tuning"
    home.mkdir()
    config = study_dir(home, n_trials=1)
    data = yaml.safe_load(config.read_text())
    data["study"]["storage"] = "sqlite:///study.db"  # relative: to the config's folder
    config.write_text(yaml.safe_dump(data))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = autotune("start", "--config", "../tuning/autotune.yaml", cwd=elsewhere)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (home / "study.db").is_file() and (home / "study-artifacts").is_dir()
    shown = autotune("status", "--config", "../tuning/autotune.yaml", cwd=elsewhere)
    assert shown.returncode == 0 and "1 of 1 trials finished" in shown.stdout, shown.stderr
    assert list(elsewhere.iterdir()) == []  # nothing made where the commands ran
    # The proposal lock is gone after a clean exit; git would ignore it anyway.
    assert not list(home.glob(".*.lock")), list(home.glob(".*.lock"))
    # A reader pointed at a study that does not exist says so and creates nothing.
    data["study"]["storage"] = "sqlite:///typo.db"
    (home / "typo.yaml").write_text(yaml.safe_dump(data))
    missing = autotune("status", "--config", str(home / "typo.yaml"), cwd=elsewhere)
    assert missing.returncode == 1 and "no study database at" in missing.stderr
    assert not (home / "typo.db").exists()


def test_a_terminal_shows_one_live_status_line_and_status_shows_it_too(tmp_path: Path) -> None:
    """On a terminal the study keeps one live line (trial, config, level, tok/s) under the
    log instead of periodic progress lines; `autotune status` prints the same line."""
    import os
    import pty
    import re
    import subprocess
    import sys
    import time

    config = study_dir(tmp_path, n_trials=2, sim_flags="--sim-load-time 2")
    data = yaml.safe_load(config.read_text())
    # Long enough a level for `autotune status` (a process of its own) to be asked during it.
    data["benchmark"].update(min_duration=3.0, max_duration=3.0)
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    master, slave = pty.openpty()
    env = {**os.environ, "AUTOTUNE_LOG_FORMAT": "console", "TERM": "xterm", "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "start", "--config", str(config)],
        cwd=tmp_path, stdin=slave, stdout=slave, stderr=slave, env=env,
    )  # fmt: skip
    os.close(slave)
    out = b""
    seen_now = ""
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break  # the child closed the terminal
            if not chunk:
                break
            out += chunk
            if not seen_now and b"level 1/2" in out:
                now = autotune("status", "--config", str(config), cwd=tmp_path)
                seen_now = next((ln for ln in now.stdout.splitlines() if ln.startswith("now:")), "")
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    text = out.decode(errors="replace")
    assert "\r\x1b[K" in text  # the line is redrawn in place
    # The baseline is the unit's own flags (study_dir's: steps 3, topk 1, draft 4).
    baseline = "trial 1 of 2 (study trial #0) · num_steps=3 eagle_topk=1 num_draft_tokens=4"
    assert f"{baseline} · loading (" in text
    assert re.search(re.escape(f"{baseline} · level 1/2 (c=1, measuring) · ") + r"\d+ tok/s", text)
    assert "benchmarking" not in text  # no periodic progress lines on a terminal
    assert seen_now.startswith("now: trial 1 of 2 (study trial #0)"), seen_now
    assert text.rstrip().endswith("\x1b[K") or "\r\x1b[K" in text[-200:]  # cleared at exit


def test_a_sped_up_rehearsal_records_real_server_units(tmp_path: Path) -> None:
    """--sim-speedup 3 runs the simulated server three times faster; the study's figures
    are the same as at real speed (measured side by side), and the report says rehearsal."""
    import optuna

    recorded = {}
    for speedup in (1, 3):
        folder = tmp_path / f"x{speedup}"
        folder.mkdir()
        config = study_dir(
            folder,
            n_trials=1,
            sim_flags=f"--sim-load-time 0.2 --sim-noise 0 --sim-speedup {speedup}",
        )
        proc = autotune("start", "--config", str(config), cwd=folder)
        assert proc.returncode == 0, proc.stderr[-3000:]
        study = optuna.load_study(study_name="e2e", storage=f"sqlite:///{folder / 'study.db'}")
        (trial,) = [t for t in study.trials if t.state.name == "COMPLETE"]
        recorded[speedup] = trial.user_attrs
        if speedup == 3:
            assert trial.user_attrs["rehearsal_speedup"] == 3
            report = autotune("report", "--config", str(config), "--out", str(folder), cwd=folder)
            assert report.returncode == 0, report.stderr
            html = next(folder.glob("*-report.html")).read_text()
            assert "A rehearsal" in html and "3x faster than real time" in html
        else:
            assert "rehearsal_speedup" not in trial.user_attrs
    for key in ("output_tok_s@c1", "output_tok_s@c4", "itl_p50_ms@c1"):
        ratio = recorded[3][key] / recorded[1][key]
        assert 0.85 < ratio < 1.15, (key, recorded[1][key], recorded[3][key])
