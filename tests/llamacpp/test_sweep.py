"""The recorder of the real llama-server's whole space (experiments/llamacpp_sweep.py), on three
configs: two passes per deployment, a second deployment for every third config, one line
per config appended as it finishes, and a run started again going on where it stopped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.e2e import free_port
from tests.helpers.real_engine import TIMEOUT
from tests.llamacpp.conftest import unit_text
from tests.llamacpp.test_real_server import _config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TIMEOUT)]

REPO = Path(__file__).resolve().parents[2]
#: Run as a user runs it, by path: the suite imports nothing from the experiments.
SWEEP = REPO / "experiments" / "llamacpp_sweep.py"


def sweep(*argv: str) -> int:
    return subprocess.run([sys.executable, str(SWEEP), *argv], timeout=TIMEOUT).returncode


def test_the_sweep_records_every_config_and_resumes(
    llama: tuple[Path, Path], tmp_path: Path
) -> None:
    binary, model = llama
    port = free_port()
    (tmp_path / "llama.service").write_text(unit_text(binary, model, port))
    data = _config(tmp_path, port, str(REPO / "search_spaces" / "llamacpp-spec.yaml"))
    data["benchmark"].update(concurrency=[1], max_tokens=32, min_duration=1.0, max_duration=1.0)
    data["objective"] = {"mode": "single", "level": 1,
                         "constraints": {"max_degenerate_share": None}}  # fmt: skip
    config = tmp_path / "autotune.yaml"
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "sweep.jsonl"
    argv = ["--config", str(config), "--workloads", "copy", "--out", str(out)]

    # Killed after two configs: the file keeps them.
    assert sweep(*argv, "--configs", "2") == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    head = lines[0]["header"]
    assert "llama" in head["llama_cpp"].lower() or "version" in head["llama_cpp"].lower()
    assert head["model"]["path"].endswith(".gguf") and head["model"]["bytes"] > 0
    assert head["machine"]["cores"] and head["date"]
    assert [row["config"]["spec_type"] for row in lines[1:]] == ["none", "ngram-simple"]

    # Started again for three: only the third is measured.
    assert sweep(*argv, "--configs", "3") == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()][1:]
    assert len(rows) == 3 and len({json.dumps(r["config"]) for r in rows}) == 3
    for i, row in enumerate(rows):
        assert row["failure"] is None, row
        passes = [(p["deployment"], p["pass"]) for p in row["passes"]]
        # Every level twice in one deployment; every third config (the first) redeployed.
        assert passes == ([(1, 1), (1, 2), (2, 1)] if i % 3 == 0 else [(1, 1), (1, 2)])
        for p in row["passes"]:
            level = p["levels"]["1"]
            assert level["output_throughput"] > 0 and p["value"] == level["output_throughput"]
