"""The time estimate, graded on two recorded nights: the real llama-server and the demo.

`experiments/estimate_truth.py` ran both studies from scratch and kept what each trial cost and
when the study really ended (experiments/results/raw/estimate_truth.jsonl). Here the trials of
each night are put back, as they finished, into a study in memory, and the estimate the
first trial allows is held against the time the night then really took.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.config import load_config
from autotune.run import eta, finalists
from autotune.search import estimate
from tests.helpers.real_engine import require

REPO = Path(__file__).resolve().parents[2]
RAW = REPO / "experiments" / "results" / "raw" / "estimate_truth.jsonl"
T0 = datetime(2026, 12, 6, 21, 37)
MODEL = Path.home() / ".cache" / "autotune" / "models" / "gemma3-270m-q4_k_m.gguf"

#: What the recorded studies' configs give `estimate.of` (examples/*.yaml): their budget,
#: the finalist runs expected, the changing-load phases' seconds, the benchmark's bound.
STUDIES = {
    # 8 trials, 2 finalists x 1 round, ramp 1->4->1 of 10-s segments each, 2 levels x 15 s
    # measured twice at most (ci_width 0.08).
    # The pruner may cut once 4 trials were measured whole, at a 5-s window at the earliest.
    "llama-server": {
        "n_trials": 8,
        "finalist_runs": 3,  # and the unit as it was, beside them: too soon to tell
        "extra_s": 60.0,
        "bound": 60.0,
        "cut_s": 5.0,
    },
    # 12 trials, 3 finalists and one run more expected (`finalists.runs_expected`), and the
    # baseline's run, 1->16->64->16->1 of 6-s segments at 4x speed, 3 levels x 2 s measured
    # twice at most (ci_width 0.03), a 1-s window at the earliest.
    "demo": {"n_trials": 12, "finalist_runs": 5, "extra_s": 22.5, "bound": 12.0, "cut_s": 1.0},
}


def test_the_recorded_studies_expect_the_finalist_runs_their_configs_give() -> None:
    for name, (config, _) in EXAMPLES.items():
        cfg = load_config(config)
        expected = finalists.runs_expected(cfg) + 1  # the unit as it was: too soon to tell
        assert STUDIES[name]["finalist_runs"] == expected, name


def _all_nights() -> dict[str, list[dict[str, Any]]]:
    nights: dict[str, list[dict[str, Any]]] = {}
    for line in RAW.read_text().splitlines():
        row = json.loads(line)
        nights.setdefault(row["study"].split(" (")[0], []).append(row)
    return nights


def _nights() -> dict[str, dict[str, Any]]:
    """The first recorded night of each study (made at f1fa63b, before this rule)."""
    return {name: rows[0] for name, rows in _all_nights().items()}


def _trial(t: dict[str, Any], start: datetime) -> optuna.trial.FrozenTrial:
    attrs: dict[str, Any] = {"levels": [{"window_s": w} for w in t["windows_s"]]}
    if t["startup_s"] is None:
        attrs["deployed"] = False
    for key in ("startup_s", "reused_from", "failure", "accept_length", "rehearsal_speedup"):
        if t.get(key) is not None:
            attrs[key] = t[key]
    if "baseline" in t:
        attrs["baseline"] = t["baseline"]
    elif t["number"] == 0:
        # Recorded before the file said so: trial 0 is the unit as it is. The llama-server
        # unit runs `--spec-type none` (examples/llamacpp-local.service): it drafts nothing;
        # the demo's unit drafts with EAGLE (3, 1, 4).
        attrs["baseline"] = True
    return optuna.trial.FrozenTrial(
        number=t["number"],
        state=optuna.trial.TrialState[t["state"]],
        value=1.0,
        datetime_start=start,
        datetime_complete=start + timedelta(seconds=t["wall_s"]),
        params={},
        distributions={},
        user_attrs=attrs,
        system_attrs={},
        intermediate_values={},
        trial_id=t["number"],
    )


def _cut_share(name: str, night: dict[str, Any]) -> float | None:
    """What the performance model expected the pruner and the capacity gate to stop, after the
    night's first trial (`run/eta.cut_share`, kept by experiments/estimate_truth.py since it was
    written). The nights before carry none: the demo's are the same command with the same
    seed and the same first trial (the unit's EAGLE 3, 1, 4), so they take the latest demo
    night's; the llama-server's space has no draft shape to model (even odds)."""
    if "cut_share" in night:
        return night["cut_share"]
    kept = [n["cut_share"] for n in _all_nights()[name] if "cut_share" in n]
    return kept[-1] if kept else None


def _first_estimate(name: str, night: dict[str, Any]) -> float:
    first = night["trials"][0]
    if "accept_length" not in first and name == "demo":
        first = {**first, "accept_length": 3.0}  # EAGLE drafting, counted by the server
    study = optuna.create_study()
    study.add_trial(_trial(first, T0))
    s = STUDIES[name]
    e = estimate.of(
        study,
        s["n_trials"],
        finalist_runs=s["finalist_runs"],
        extra_s=s["extra_s"],
        live=False,
        bench_bound_s=s["bound"],
        warmup=4,
        cut_s=s["cut_s"],
        cut_share=_cut_share(name, night),
    )
    assert e is not None
    return e.left_s


def _mean_real_left(nights: list[dict[str, Any]]) -> float:
    return sum(n["real_left_s"] for n in nights) / len(nights)


@pytest.mark.parametrize("name", ["llama-server", "demo"])
def test_the_first_estimate_is_within_a_quarter_of_the_mean_night(name: str) -> None:
    """The estimate is an expectation: a night of the same command is not one length (the
    demo's 119 to 227 s after its first trial, one finalist round or four), so it is held
    against the mean of every recorded night, within the quarter the issue asks (the
    llama-server's -17 %, the demo's within 10 % since the model's cut share and the
    finalists' one extra run), and never 80 % off any one (a first trial measured twice at
    every level charges the rest as slow)."""
    nights = _all_nights()[name]
    assert len(nights) >= 2
    predicted = [_first_estimate(name, night) for night in nights]
    mean = sum(predicted) / len(predicted)
    assert abs(mean / _mean_real_left(nights) - 1) <= 0.25, (mean, _mean_real_left(nights))
    for night, said in zip(nights, predicted, strict=True):
        assert abs(said / night["real_left_s"] - 1) <= 0.8, (night["date"], said)


def test_the_first_estimate_moved_toward_the_truth_on_both_engines() -> None:
    """What the pruner's even odds mend, on the same record: the demo's first estimate was
    long on every night (by 60 % on the median one); the llama-server's stays within 25 %
    of each of its nights (-12 to -23 %), although it cut one trial in 22."""
    for name, nights in _all_nights().items():
        for night in nights:
            said = _first_estimate(name, night)
            if name == "demo" and night["commit"] in ("2bb3988", "ba96b07"):  # the rule before
                assert said < night["predicted_left_s"], (night["date"], said)
            if name == "llama-server":
                assert abs(said / night["real_left_s"] - 1) <= 0.25, (night["date"], said)


def test_the_old_rule_missed_the_real_engine_by_two_thirds() -> None:
    """What the rule mends, on the same record: the old estimate was the first trial's time
    for every trial to come (the llama-server's baseline drafts nothing: 21 s against the
    74 s of every drafting config)."""
    night = _nights()["llama-server"]
    assert night["predicted_left_s"] / night["real_left_s"] - 1 < -0.5
    first, later = night["trials"][0], night["trials"][1:]
    assert all(t["wall_s"] > 3 * first["wall_s"] for t in later)


def test_a_trial_to_come_costs_the_mean_of_every_kind_so_far() -> None:
    """Pruned and never-deployed trials recur in their share: a sum wants the mean."""
    study = optuna.create_study()
    walls = [("COMPLETE", 12.0, 3.0), ("PRUNED", 4.0, 3.0), ("COMPLETE", 0.05, None)]
    at = T0
    for number, (state, wall, accept) in enumerate(walls):
        deployed = accept is not None
        t = {"number": number, "state": state, "wall_s": wall,
             "windows_s": [1.0] if deployed else [], "startup_s": 1.0 if deployed else None,
             "accept_length": accept,
             "failure": None if deployed else "capacity_predicted"}  # fmt: skip
        study.add_trial(_trial(t, at))
        at += timedelta(seconds=wall)
    e = estimate.of(study, 5, finalist_runs=1, live=False, bench_bound_s=99.0)
    assert e is not None
    assert e.per_trial_s == pytest.approx((12.0 + 4.0 + 0.05) / 3)
    assert e.left_s == pytest.approx(2 * e.per_trial_s + 12.0)  # the finalist: a whole one


# -- before any trial: one figure -----------------------------------------------------------

EXAMPLES = {
    "demo": (REPO / "examples" / "demo.yaml", REPO / "examples" / "sglang-sim.service"),
    "llama-server": (
        REPO / "examples" / "llamacpp-local.yaml",
        REPO / "examples" / "llamacpp-local.service",
    ),
}


def _model() -> Path:
    if not MODEL.exists():
        raise FileNotFoundError(MODEL)
    return MODEL


def _night(name: str) -> eta.Night:
    config, unit = EXAMPLES[name]
    n = eta.night(load_config(config), unit.read_text())
    assert n.load_s is not None  # a duration, from the model's size, not "plus N loads"
    return n


def test_the_real_engines_night_before_it_starts_is_within_half_again_of_every_one() -> None:
    require(_model, FileNotFoundError, "`make llamacpp-install` fetches the model")
    n = _night("llama-server")
    for night in _all_nights()["llama-server"]:
        assert 1 / 1.5 <= n.total_s / night["total_s"] <= 1.5, (n, night["date"])


def test_the_demos_night_before_it_starts_is_long_by_its_bound() -> None:
    """Each deployment's benchmark at its bound (the demo's levels mostly meet their target
    at the first window: 8.5 s of 12) and every deployment counted (two or three of the
    space's configs are predicted short of the floor and never deployed): never short of a
    recorded night, about 1.5 times the mean one."""
    n = _night("demo")
    nights = _all_nights()["demo"]
    for night in nights:
        assert n.total_s >= night["total_s"], (n, night["date"])
    mean = sum(night["total_s"] for night in nights) / len(nights)
    assert n.total_s <= 1.7 * mean, (n, mean)


def test_a_model_autotune_cannot_size_leaves_the_loads_counted_apart() -> None:
    cfg = load_config(EXAMPLES["demo"][0])
    unit = EXAMPLES["demo"][1].read_text()
    real = unit.replace("--sim-load-time 1.5", "").replace(
        "autotune sim", "python3 -m sglang.launch_server"
    )
    said = eta.before_start(cfg, real.replace("Qwen/Qwen3.5-122B-A10B", "/nowhere/some-model"))
    # 12 deployments, 4 finalist runs expected and the unit as it was beside them.
    assert said.startswith("about ") and " plus 17 model loads: up to 12 deployments" in said
    # A hub name with its parameter count (122B, taken as BF16) at the rate calibration.md
    # measured for that model: its 90-100 s.
    assert eta.night(cfg, real).load_s == pytest.approx(95.0)
    assert "each a model load of about 2 min" in eta.before_start(cfg, real)


def test_nonsense_in_the_units_flags_leaves_the_estimate_without_the_load() -> None:
    cfg = load_config(EXAMPLES["demo"][0])
    unit = EXAMPLES["demo"][1].read_text()
    said = eta.before_start(cfg, unit.replace("--sim-speedup 4", "--sim-speedup fast"))
    assert said.startswith("about ")  # no traceback: the simulator refuses it at start
    assert eta.night(cfg, unit.replace("--sim-load-time 1.5", "--sim-load-time -3")).load_s == (
        pytest.approx(1.5 / 4 + 0.7)
    )


def test_once_the_pruner_may_cut_a_trial_is_charged_with_even_odds_that_move() -> None:
    """Four trials measured whole: the rest are charged the trials since then with a prior
    of one whole trial and one cut at its first window (load and overhead plus `cut_s`)."""
    study = optuna.create_study()
    at = T0
    walls = [("COMPLETE", 12.0), ("COMPLETE", 12.0), ("COMPLETE", 12.0), ("COMPLETE", 12.0)]
    walls += [("PRUNED", 3.0)]
    for number, (state, wall) in enumerate(walls):
        t = {"number": number, "state": state, "wall_s": wall, "startup_s": 1.0,
             "windows_s": [8.0] if state == "COMPLETE" else [1.0], "accept_length": 2.0,
             "failure": None}  # fmt: skip
        study.add_trial(_trial(t, at))
        at += timedelta(seconds=wall)
    kw: dict[str, Any] = {"live": False, "bench_bound_s": 99.0, "cut_s": 1.0}
    e = estimate.of(study, 8, warmup=4, **kw)
    assert e is not None
    # The overhead: each trial's wall time outside its windows (4 s, and 2 s for the cut).
    cut = (4 * 4.0 + 2.0) / 5 + 1.0
    assert e.left_s == pytest.approx(3 * (3.0 + 12.0 + cut) / 3)
    # Before the fourth whole trial nothing can be cut: a trial to come is a trial so far.
    early = optuna.create_study()
    for t in study.get_trials()[:2]:
        early.add_trial(t)
    e = estimate.of(early, 8, warmup=4, **kw)
    assert e is not None
    assert e.left_s == pytest.approx(2 * 12.0 + 4 * (12.0 + 5.0) / 2)
    # A study that never prunes charges the mean throughout.
    e = estimate.of(study, 8, **kw)
    assert e is not None
    assert e.left_s == pytest.approx(3 * (4 * 12.0 + 3.0) / 5)


# -- what the model expects the pruner to cut ----------------------------------------------


def test_the_share_of_the_first_trials_cut_follows_the_model_of_the_landscape() -> None:
    """After the simulated Qwen's baseline (EAGLE 3, 1, 4) the model sees a space most of
    whose 427 configs are far below the best or short of the floor, as the demo's nights
    found (after the pruner's warm-up, 7 of 8 trials ended early on the median night);
    with the model off there is nothing to say."""
    from autotune.run import eta
    from autotune.testservers.landscape import Cell
    from tests.helpers.modelled import run_study

    cell = Cell("sglang-eagle", "qwen3.5-122b-a10b-mtp", "natural", "geomean")
    study, server = run_study(cell, 1, seed=3)
    cfg = server.land.cfg
    share = eta.cut_share(cfg, study)
    assert share is not None and 0.8 < share <= 1.0, share
    off = dataclasses.replace(cfg, study=dataclasses.replace(cfg.study, performance_model=False))
    assert eta.cut_share(off, study) is None
    unpruned = dataclasses.replace(cfg, study=dataclasses.replace(cfg.study, prune=False))
    assert eta.cut_share(unpruned, study) is None


@pytest.mark.parametrize("share", [0.0, 0.25, 1.0])
def test_the_prior_splits_its_two_trials_by_the_share(share: float) -> None:
    study = optuna.create_study()
    at = T0
    for number in range(4):
        t = {"number": number, "state": "COMPLETE", "wall_s": 12.0, "startup_s": 1.0,
             "windows_s": [8.0], "accept_length": 2.0, "failure": None}  # fmt: skip
        study.add_trial(_trial(t, at))
        at += timedelta(seconds=12.0)
    e = estimate.of(study, 6, live=False, warmup=4, cut_s=1.0, cut_share=share)
    assert e is not None
    cut = 4.0 + 1.0  # the overhead outside the windows, and the first level's shortest window
    assert e.left_s == pytest.approx(2 * ((1 - share) * 12.0 + share * cut))
