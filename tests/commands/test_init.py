"""`autotune init` on a local unit file, through the real CLI: the config it writes tunes
what the operator came for, within the unit's own limits, and says why in comments."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from autotune.config import load_config
from autotune.engines.sglang import SGLangEngine
from tests.helpers.e2e import autotune, free_port, sim_unit

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
    # Half the unit's cap (see the floor's own test below), not 16 of 21.
    assert cfg["objective"]["constraints"]["min_running_requests"] == 10
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


def test_a_cuda_graph_cap_below_the_levels_becomes_the_top_level_and_halves_to_the_floor(
    tmp_path: Path,
) -> None:
    cfg, _, _ = _init(tmp_path, sim_unit(free_port(), f"{CHAIN} --cuda-graph-max-bs 8"))
    assert cfg["benchmark"]["concurrency"] == [1, 8]
    assert cfg["objective"]["constraints"]["min_running_requests"] == 4


def test_the_floor_says_how_many_configs_it_leaves_and_the_prediction_is_low_on_the_server(
    tmp_path: Path,
) -> None:
    """Issue 48: from `--max-running-requests 21` init wrote a floor of 16, which every tree
    config failed (they ran 4-8 at once). Now: half the unit's cap, with the configs the
    capacity rule predicts to hold it, a prediction checked against the simulated server."""
    cfg, text, _ = _init(tmp_path, sim_unit(free_port(), f"{CHAIN} --max-running-requests 21"))
    assert cfg["benchmark"]["concurrency"] == [1, 16, 21]
    assert cfg["objective"]["constraints"]["min_running_requests"] == 10
    (line,) = [x for x in text.splitlines() if "min_running_requests:" in x]
    said = re.search(r"(\d+) of (\d+) configs predicted to hold it", line)
    assert said and int(said[2]) == 427 and 0 < int(said[1]) < 427, line
    assert "the unit's cap of 21 requests at once" in line
    # What the server then runs: the rule's count (from the unit's cap, 21 at m = 4:
    # 21 * 4 / m) within 1.5x of it for a chain and two trees (the chain is held by its
    # memory, 18, below the cap; the trees' fixed share per request makes them hold more).
    for steps, topk, draft, m in ((3, 1, 4, 4), (3, 4, 8, 12), (5, 4, 16, 20)):
        flags = (
            f"--speculative-num-steps {steps} --speculative-eagle-topk {topk} "
            f"--speculative-num-draft-tokens {draft} --mem-fraction-static 0.85 "
            "--max-running-requests 21"
        )
        served = _served_running_requests(tmp_path, flags)
        predicted = min(21, 21 * 4 // m)
        assert 1 / 1.5 <= predicted / served <= 1.5, (steps, topk, draft, served)


def _served_running_requests(tmp_path: Path, flags: str) -> int:
    port = free_port()
    argv = [
        sys.executable, "-m", "autotune.sim", "--model-path", "Qwen/Qwen3.5-122B-A10B",
        "--host", "127.0.0.1", "--port", str(port), "--speculative-algorithm", "EAGLE",
        *flags.split(), "--sim-load-time", "0.1",
    ]  # fmt: skip
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert server.poll() is None and time.monotonic() < deadline, "the sim did not start"
            try:
                info = httpx.get(f"http://127.0.0.1:{port}/get_server_info", timeout=2).json()
                return int(info["max_running_requests"])
            except (httpx.TransportError, ValueError):
                time.sleep(0.1)
    finally:
        server.terminate()
        server.wait(timeout=10)


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
