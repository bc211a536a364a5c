"""A study scored on open-loop levels, end to end on the real simulator: goodput per rate."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from tests.helpers.e2e import autotune, study_dir

pytestmark = pytest.mark.slow  # end-to-end studies: not in make test-fast


def test_a_max_rate_study_scores_each_config_by_the_highest_rate_it_serves(
    tmp_path: Path,
) -> None:
    config = study_dir(
        tmp_path,
        n_trials=2,
        sim_flags="--sim-load-time 0.2 --sim-speedup 4 --max-running-requests 4",
        objective={
            "mode": "max_rate",
            "slo": {"ttft_ms": 1500, "tpot_ms": 80},
            "constraints": {"min_running_requests": 4},
        },
    )
    data = yaml.safe_load(config.read_text())
    data["benchmark"].update(request_rate=[0.5, 16], rate_duration=6)
    config.write_text(yaml.safe_dump(data))

    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    study = optuna.load_study(study_name="e2e", storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert study.metric_names == ["max_rate_req_s"]
    scored = [t for t in study.trials if t.user_attrs.get("rates")]
    assert scored, "no trial measured its rates"
    for t in scored:
        rates = {r["rate"]: r for r in t.user_attrs["rates"]}
        # 0.5/s is served within the SLOs, 16/s by four slots is not: the short search
        # measures halfway between them, and the value is the highest rate that held.
        assert rates[0.5]["meets_slo"] and not rates[16.0]["meets_slo"]
        assert 8.25 in rates
        assert t.value == max(r for r, x in rates.items() if x["meets_slo"])
        assert t.value == t.user_attrs["max_rate_meeting_slo"]
        assert t.user_attrs["goodput@0.5/s"] == rates[0.5]["goodput"]
        assert t.user_attrs["rates_s"] > 0

    report = autotune("report", "--config", str(config), cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    html = (tmp_path / "e2e-report.html").read_text()
    assert 'id="rates"' in html and "Goodput per rate" in html
    assert "TTFT &lt;= 1500 ms and TPOT &lt;= 80 ms" in html
