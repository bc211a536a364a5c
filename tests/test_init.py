"""`autotune init` on a local unit file, through the real CLI: the config it writes tunes
what the operator came for, within the unit's own limits, and says why in comments."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.config import load_config
from autotune.engines.sglang import SGLangEngine
from tests.e2e import autotune, free_port, sim_unit

CHAIN = (
    "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 "
    "--mem-fraction-static 0.85"
)


def _init(tmp_path: Path, unit: str) -> tuple[dict, str, str]:
    (tmp_path / "sglang.service").write_text(unit)
    proc = autotune(
        "init",
        "--unit-file",
        str(tmp_path / "sglang.service"),
        "--out",
        str(tmp_path / "t"),
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (tmp_path / "t" / "autotune.yaml").read_text()
    return yaml.safe_load(text), text, proc.stdout


def test_an_eagle_chain_unit_gets_a_space_that_tunes_topk_within_its_limits(
    tmp_path: Path,
) -> None:
    unit = sim_unit(free_port(), f"{CHAIN} --max-running-requests 21")
    unit = unit.replace("Type=simple", "Type=simple\nUser=tuner")
    cfg, text, out = _init(tmp_path, unit)
    assert cfg["search_space"] == "sglang-eagle.yaml"
    loaded = load_config(tmp_path / "t" / "autotune.yaml")
    topks = {c.params["speculative_eagle_topk"] for c in loaded.space.enumerate()}
    assert topks == {1, 2, 4, 8}  # trees too, the unit's chain among them
    assert cfg["study"]["n_trials"] == 20 and cfg["study"]["on_finish"] == "apply-best"
    assert cfg["benchmark"]["concurrency"] == [1, 16, 21]  # never past the unit's cap
    assert "--max-running-requests 21" in text
    assert cfg["objective"]["constraints"]["min_running_requests"] == 16
    bench = cfg["benchmark"]
    assert (bench["max_tokens"], bench["min_duration"], bench["max_duration"]) == (512, 20, 90)
    assert "User= is not applied" in text and "User= is not applied" in out
    for line in text.splitlines():
        key = line.split(":")[0].strip()
        if key in ("n_trials", "on_finish", "concurrency", "max_tokens", "min_duration"):
            assert "#" in line, line  # each choice says why, in one line
    assert "ok  unit:" in out and "Traceback" not in out
    # One figure for the night, the model load a duration: the simulator's 0.2 s load plus
    # its start, twenty deployments and the finalists at the benchmark's bound.
    (said,) = [x for x in out.splitlines() if x.startswith("ok  estimate: ")]
    assert said.startswith("ok  estimate: about "), said
    assert "plus" not in said.split(":")[1], said  # no "plus N model loads" left apart
    assert "up to 20 deployments" in said and "each a model load of about 1 s" in said, said


def test_a_cuda_graph_cap_below_the_levels_becomes_the_top_level_and_the_floor(
    tmp_path: Path,
) -> None:
    cfg, _, _ = _init(tmp_path, sim_unit(free_port(), f"{CHAIN} --cuda-graph-max-bs 8"))
    assert cfg["benchmark"]["concurrency"] == [1, 8]
    assert cfg["objective"]["constraints"]["min_running_requests"] == 8


@pytest.mark.parametrize(
    ("flags", "space"),
    [
        ({"--speculative-algorithm": "EAGLE", "--speculative-eagle-topk": "1"}, "sglang-eagle"),
        ({"--speculative-algorithm": "NEXTN"}, "sglang-eagle"),
        ({"--speculative-algorithm": "EAGLE3", "--speculative-eagle-topk": "4"}, "sglang-eagle"),
        ({"--speculative-algorithm": "NGRAM"}, "sglang-ngram"),
        ({"--speculative-algorithm": "EAGLE", "--speculative-adaptive": None}, "sglang-adaptive"),
    ],
)
def test_the_space_follows_what_the_algorithm_can_run(
    flags: dict[str, str | None], space: str
) -> None:
    assert SGLangEngine().default_space(flags)[0] == f"{space}.yaml"


def test_a_config_that_fails_its_checks_is_kept_as_a_draft_not_as_autotune_yaml(
    tmp_path: Path,
) -> None:
    # A mistyped tuned flag: init writes the config, validate refuses the unit.
    unit = sim_unit(free_port(), CHAIN.replace("--speculative-num-steps", "--speculative-num-step"))
    (tmp_path / "sglang.service").write_text(unit)
    out = tmp_path / "t"
    argv = ["init", "--unit-file", str(tmp_path / "sglang.service"), "--out", str(out)]
    proc = autotune(*argv, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--speculative-num-step: did you mean --speculative-num-steps?" in proc.stderr
    assert not (out / "autotune.yaml").exists()
    assert yaml.safe_load((out / "autotune.yaml.draft").read_text())["target"]
    assert f"The config is in {out / 'autotune.yaml.draft'}" in proc.stderr
    # Fixed, init runs again without --force: no autotune.yaml stands in its way.
    (tmp_path / "sglang.service").write_text(sim_unit(free_port(), CHAIN))
    again = autotune(*argv, cwd=tmp_path, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (out / "autotune.yaml").exists()
