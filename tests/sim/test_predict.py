"""--predict: ground truth as JSON lines, for one config or a whole search space."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.sim import cli, model, predict
from autotune.sim.args import PredictOptions
from autotune.sim.profiles import get_profile

ROOT = Path(__file__).resolve().parents[2]
EAGLE = ROOT / "search_spaces" / "sglang-eagle.yaml"
MTP = ROOT / "search_spaces" / "sglang-mtp.yaml"


def run_cli(*argv: str, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    assert cli.main(["--predict", *argv]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_levels_have_the_promised_fields(capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_cli("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
                   "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
                   "--concurrency", "1,16,64", "--workload", "natural", "--max-tokens", "512",
                   "--input-len", "1000", capsys=capsys)  # fmt: skip
    assert [r["concurrency"] for r in rows] == [1, 16, 64]
    for r in rows:
        for key in ("output_throughput", "accept_length", "max_running_requests",
                    "max_total_num_tokens"):  # fmt: skip
            assert key in r
        assert r["valid"] is True and r["workload"] == "natural"
        assert r["mean_output_tokens"] < 512


def test_refused_config_prints_one_invalid_line_per_level(
    capsys: pytest.CaptureFixture[str],
) -> None:
    flags = ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"]
    rows = run_cli(*flags, "--mem-fraction-static", "0.7", "--concurrency", "1,16", capsys=capsys)
    assert [r["concurrency"] for r in rows] == [1, 16]
    assert all(r["valid"] is False and "Not enough memory" in r["reason"] for r in rows)
    rows = run_cli("--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "2",
                   "--concurrency", "1", capsys=capsys)  # fmt: skip
    assert rows == [{"concurrency": 1, "valid": False, "reason": "AssertionError"}]


def test_full_eagle_space_is_fast_and_complete() -> None:
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "autotune.sim", "--predict", "--space", str(EAGLE),
         "--concurrency", "1,16,64"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    elapsed = time.monotonic() - t0
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 427, len(rows)
    assert elapsed < 10, f"{len(rows)} configs took {elapsed:.1f} s"
    keys = {tuple(sorted(r["params"].items())) for r in rows}
    assert len(keys) == len(rows), "configs are distinct"
    refused = [r for r in rows if not r["valid"]]
    # Out of memory only in the corner where a decode step allocates steps * topk = 64.
    assert refused and all("memory" in r["reason"] for r in refused)
    assert {(r["params"]["speculative_num_steps"], r["params"]["speculative_eagle_topk"])
            for r in refused} == {(8, 8)}  # fmt: skip
    for r in rows:
        assert set(r["params"]) == set(predict.KNOB_NAMES)
        if r["valid"]:
            assert len(r["levels"]) == 3 and r["resolved"] == r["params"]


def test_mtp_space_has_8_configs(capsys: pytest.CaptureFixture[str]) -> None:
    rows = run_cli("--space", str(MTP), "--concurrency", "1", capsys=capsys)
    assert [r["params"]["speculative_num_steps"] for r in rows] == list(range(1, 9))
    assert all(r["params"]["speculative_num_draft_tokens"] ==
               r["params"]["speculative_num_steps"] + 1 for r in rows)  # fmt: skip


def test_plain_yaml_list_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "list.yaml"
    f.write_text("- {steps: 2, topk: 1, draft: 9}\n- {steps: 2, topk: 2, draft: 9}\n")
    rows = run_cli("--space", str(f), "--concurrency", "1", capsys=capsys)
    assert rows[0]["valid"] and rows[0]["resolved"]["speculative_num_draft_tokens"] == 3
    assert not rows[1]["valid"] and "Capture cuda graph failed" in rows[1]["reason"]


def test_bad_space_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--predict", "--space", str(tmp_path / "missing.yaml")]) == 2
    assert "not found" in capsys.readouterr().err


def test_in_process_calls_are_cheap() -> None:
    prof = get_profile("default")
    opts = PredictOptions(concurrency=(1, 16, 64))
    t0 = time.perf_counter()
    n = 0
    for steps in range(1, 9):
        for topk in (1, 2, 4, 8):
            for draft in range(2, min(64, steps * topk + 1) + 1):
                lc = model.Launch("EAGLE", steps, topk, draft)
                predict.predict_config(prof, lc, opts.concurrency)
                n += 1
    per_call = (time.perf_counter() - t0) / n
    assert per_call < 0.005, f"{per_call * 1000:.2f} ms per config"
    buf = io.StringIO()
    assert predict.run(prof, model.Launch(), opts, buf) == 0
    assert len(buf.getvalue().splitlines()) == 3
