"""Static against adaptive speculation end to end, on the simulator through the real CLI:
a study on search_spaces/sglang-adaptive.yaml, `export-adaptive --measure`, the report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.helpers.e2e import autotune, status, study_dir

pytestmark = pytest.mark.slow


def test_adaptive_space_study_export_and_report(tmp_path: Path) -> None:
    config = study_dir(
        tmp_path,
        space="sglang-adaptive.yaml",
        n_trials=10,
        concurrency=[1, 16],
        objective={"mode": "geomean"},
        # A rehearsal 4x faster: the changing-load phases' 3 s segments (server time) pass in
        # 0.75 s; every figure is recorded in the server's units all the same.
        sim_flags="--sim-load-time 0.2 --sim-noise 0.01 --sim-speedup 4",
        finalists=2,
    )
    data = yaml.safe_load(config.read_text())
    data["benchmark"].update(finalist_rounds=1, load_phase_segment=3)
    config.write_text(yaml.safe_dump(data))
    proc = autotune("start", "--config", str(config), cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = status(config)["trials"]
    arms = {bool(t["config"].get("speculative_adaptive")) for t in trials if t["config"]}
    assert arms == {False, True}, trials  # both arms of the study ran
    # An adaptive trial ran with the file beside the unit; a stopped local server leaves the
    # user's folder as it was.
    assert not (tmp_path / "sglang-adaptive.json").exists()
    assert not any("autotune-absent" in p.name for p in tmp_path.iterdir())

    out = tmp_path / "exported.json"
    proc = autotune("export-adaptive", "--config", str(config), "--out", str(out),
                    "--measure", cwd=tmp_path, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    exported = json.loads(out.read_text())
    assert exported["1"]["candidate_steps"][0] in range(1, 9)
    assert all(len(v["candidate_steps"]) == 1 for v in exported.values())
    lines = proc.stdout.splitlines()
    for level in ("c=1 ", "c=16"):
        row = next(line for line in lines if line.startswith(level) and "tok/s" not in line)
        # static, best adaptive trial, SGLang's default and the exported config all measured
        assert row.count("—") == 0, proc.stdout
    assert "measuring an exported config" in proc.stderr and "probe=exported" in proc.stderr
    # The declared best (as a finalist) and both probes went through the changing-load phase
    # (c=1, 16, 1), judged against the levels the same deployment served.
    phase = lines[lines.index(next(x for x in lines if x.startswith("through the changing")))
                  + 1 :]  # fmt: skip
    labels = {x.split()[0] for x in phase}
    assert labels == {"declared", "sglang-default", "exported"}, proc.stdout
    for row in phase:
        assert "tok/s  per segment [" in row and ("held up" in row or "NOT HOLD UP" in row), row
    assert "c=1→16→1, 3.0 s each" in proc.stdout

    proc = autotune("report", "--config", str(config), "--out", str(tmp_path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    html = Path(proc.stdout.strip()).read_text()
    section = html[html.index('id="adaptive"') :]
    section = section[: section.index("</section>")]
    assert "Static or adaptive speculation" in section
    assert len(re.findall(r"<tr><td>c=\d+</td>", section)) == 2
    assert "exported: max_running_requests" in section


def test_export_needs_a_static_vs_adaptive_space(tmp_path: Path) -> None:
    config = study_dir(tmp_path, n_trials=1)
    assert autotune("start", "--config", str(config), cwd=tmp_path).returncode == 0
    proc = autotune("export-adaptive", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 2
    assert "export-adaptive needs a --speculative-adaptive switch" in proc.stderr
    assert "Traceback" not in proc.stderr
