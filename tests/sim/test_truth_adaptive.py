"""The simulator's ground truth for a space with a switch and a companion file: each config
scored as its deployment would run (the patched unit, its environment, its files)."""

from __future__ import annotations

import json
from pathlib import Path

from autotune.config import load_config
from autotune.sim import truth
from tests.helpers.e2e import study_dir


def test_the_simulators_truth_deploys_switches_and_files_as_a_trial_would(tmp_path: Path) -> None:
    config = study_dir(tmp_path, space="sglang-adaptive.yaml", concurrency=[1, 16],
                       objective={"mode": "geomean"})  # fmt: skip
    cfg = load_config(str(config))
    table = {
        json.dumps(t.config, sort_keys=True): t
        for t in truth.study_truth(cfg, (tmp_path / "sim.service").read_text())
    }
    assert len(table) == cfg.space.size()

    def of(**config: object) -> truth.Truth:
        return table[json.dumps(config, sort_keys=True)]

    static = of(speculative_adaptive=False, speculative_num_steps=7, speculative_eagle_topk=1,
                speculative_num_draft_tokens=8)  # fmt: skip
    wide = of(speculative_adaptive=True, adaptive_candidate_steps="3,5,7")
    narrow = of(speculative_adaptive=True, adaptive_candidate_steps="1,3")
    default = of(speculative_adaptive=True, adaptive_candidate_steps="default")
    # The file reaches the model: memory follows the largest candidate of each set.
    assert wide.levels[0]["max_running_requests"] == static.levels[0]["max_running_requests"]
    assert narrow.levels[0]["max_running_requests"] > wide.levels[0]["max_running_requests"]
    assert narrow.value != wide.value
    # SGLang's built-in config (no file) reserves for its largest candidate, 7.
    assert default.levels[0]["max_running_requests"] == static.levels[0]["max_running_requests"]
