"""Less GPU time per answer, on the real simulator through the real CLI and SQLite: trials cut
short after a level (PRUNED), and restarts skipped when capacity is predictable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.sim import model
from autotune.sim.profiles import get_profile
from tests.helpers.e2e import autotune, status, study_dir

pytestmark = pytest.mark.slow


def _edit(config: Path, **sections: dict[str, Any]) -> None:
    data = yaml.safe_load(config.read_text())
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    config.write_text(yaml.safe_dump(data, sort_keys=False))


def test_a_config_that_cannot_win_is_pruned_and_never_declared_best(tmp_path: Path) -> None:
    # The MTP chain on the Qwen profile: steps 1-8, every one feasible; geomean over 1 and 16
    # clients spans 261-356 tok/s (the deep chains far behind), so once four trials ran
    # every level, the weak configs measured later stop after their first level.
    config = study_dir(
        tmp_path,
        space="sglang-mtp.yaml",
        n_trials=8,
        concurrency=[1, 16],
        objective={"mode": "geomean"},
        sim_flags="--sim-load-time 0.2 --sim-noise 0",
    )
    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = status(config)["trials"]
    pruned = [t for t in trials if t["state"] == "PRUNED"]
    assert pruned, proc.stderr[-3000:]
    assert "pruned: cannot plausibly beat the best so far" in proc.stderr

    best = json.loads(autotune("best", "--json", "--config", str(config), cwd=tmp_path).stdout)
    full = [t for t in trials if t["state"] == "COMPLETE"]
    assert best["trial"] in {t["number"] for t in full}
    for t in pruned:
        verdict = t["pruned"]
        # Optuna keeps a pruned trial's last reported value: the estimate, never a measurement.
        assert t["value"] == pytest.approx(verdict["estimate"]) and t["feasible"] is None
        # Stopped before it measured both levels in full, with a verdict that explains it.
        levels, when = verdict["after_levels"], verdict["when"]
        assert len(levels) == 1 or (len(levels) == 2 and when != "after the level"), verdict
        assert verdict["p_beat"] < 0.01
        assert verdict["estimate"] < best["value"]
        assert verdict["incumbent"] in {x["number"] for x in full}
    text = autotune("status", "--config", str(config), cwd=tmp_path).stdout
    assert "pruned after c=" in text

    proc = autotune("report", "--config", str(config), "--out", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    html = Path(proc.stdout.strip()).read_text()
    assert "Pruned trials" in html and "pruned (stopped early)" in html


DRAFT = "speculative_num_steps * speculative_eagle_topk + 1"
CHAIN_AND_PAIRS = {
    "engine": "sglang",
    "params": {
        "speculative_num_steps": {"flag": "--speculative-num-steps", "type": "int", "low": 1,
                                  "high": 8},
        "speculative_eagle_topk": {"flag": "--speculative-eagle-topk", "type": "int",
                                   "choices": [1, 2]},
        "speculative_num_draft_tokens": {"flag": "--speculative-num-draft-tokens", "type": "int",
                                         "value": DRAFT},
    },
    "memory_grows_with": ["speculative_num_steps", "speculative_eagle_topk",
                          "speculative_num_draft_tokens"],
    "memory_per_request": "speculative_num_steps * speculative_eagle_topk"
                          " + speculative_num_draft_tokens",
}  # fmt: skip


def test_a_config_predicted_below_the_floor_is_not_deployed(tmp_path: Path) -> None:
    # Steps 1-8 x topk 1-2 on the Qwen profile with 16 running requests required: 6 of the
    # 16 configs leave enough. The unit starts at (5, 1, 6), 14 running requests: every config
    # reserving at least its 11 tokens per request falls short, and (3, 2, 7) for one is not
    # ruled out by the sampler's own memory rule (it has a bigger topk but fewer steps).
    config = study_dir(
        tmp_path,
        space=CHAIN_AND_PAIRS,
        n_trials=20,
        concurrency=[16],
        flags="--speculative-num-steps 5 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 6",
        objective={"mode": "geomean", "constraints": {"min_running_requests": 16}},
    )
    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "predicted infeasible: not deployed" in proc.stderr
    trials = status(config)["trials"]
    predicted = [t for t in trials if t["failure"] == "capacity_predicted"]
    assert predicted
    profile = get_profile("qwen3.5-122b-a10b-mtp")
    for t in predicted:
        c = t["config"]
        launch = model.Launch(
            "EAGLE",
            c["speculative_num_steps"],
            c["speculative_eagle_topk"],
            c["speculative_num_draft_tokens"],
        )
        resolved = model.resolve(profile, launch)
        # Right every time: the server would have refused it or run fewer than 16.
        assert isinstance(resolved, model.Refusal) or resolved.max_running_requests < 16
        assert t["feasible"] is False and "not deployed" in t["reason"]
    # Nothing was started for them.
    assert proc.stderr.count("deploying") <= len(trials) - len(predicted)

    proc = autotune("report", "--config", str(config), "--out", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ruled out by prediction" in Path(proc.stdout.strip()).read_text()
