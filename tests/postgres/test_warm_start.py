"""`start --from` where a fleet keeps its studies: one real PostgreSQL, the hosts stand-in
systemd hosts running the simulator, every worker a real `autotune start` process."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.search import records, warm_start
from autotune.search import study as st
from autotune.testservers.postgres import PASSWORD, PostgresServer
from tests.helpers.e2e import autotune, status
from tests.postgres.hosts import SimHost, workers_config

pytestmark = pytest.mark.slow


#: No start-to-start noise: whether the earlier study holds is judged on the baseline
#: measured again, and a test of both outcomes must not depend on a 2 % draw.
STEADY = "--sim-load-time 0.2 --sim-noise 0"


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[list[SimHost]]:
    made = [SimHost(tmp_path, f"gpu{i}", STEADY) for i in (1, 2)]
    yield made
    for h in made:
        h.cleanup()


def _next(first: Path, path: Path, study: str, workload: str, storage: str | None = None) -> Path:
    """The fleet's config for another study, maybe elsewhere, maybe on other traffic."""
    data: dict[str, Any] = yaml.safe_load(first.read_text())
    data["study"]["name"] = study
    if storage is not None:
        data["study"]["storage"] = storage
    data["benchmark"]["workload"] = workload
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_fleets_second_study_starts_from_its_first_in_the_same_database(
    tmp_path: Path,
    hosts: list[SimHost],
    pg_url: str,
    pg_env: dict[str, str],
    postgres: PostgresServer,
) -> None:
    first = workers_config(tmp_path / "first.yaml", pg_url, hosts, n_trials=4, finalists=2)
    run = autotune("start", "--config", str(first), cwd=tmp_path, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    best = autotune("best", "--json", "--config", str(first), cwd=tmp_path)
    earlier_best = json.loads(best.stdout)

    # Both workers start the second study with --from: one writes the record, the other
    # joins the study as it is. The traffic moved to greedy, and the baseline, measured in
    # both, says so: nothing is queued, and the study runs as a cold one would.
    second = _next(first, tmp_path / "second.yaml", "fleet-greedy", "greedy")
    run = autotune("start", "--config", str(second), "--from", "fleet", cwd=tmp_path, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "starting from an earlier study" in run.stderr
    assert "the world moved since the earlier study" in run.stderr
    assert "is ignored" not in run.stderr
    s = status(second)
    assert s["warm_start"]["from"] == "fleet"
    assert s["warm_start"]["differences"] == {"workload": {"earlier": "natural", "now": "greedy"}}
    states = Counter(t["state"] for t in s["trials"])
    assert states["COMPLETE"] + states["PRUNED"] == 4 and states["RUNNING"] == 0, states

    study = optuna.load_study(study_name="fleet-greedy", storage=pg_url)
    record = study.user_attrs[records.STUDY_WARM_START]
    assert record["best"]["trial"] == earlier_best["trial"]
    assert record["check"]["holds"] is False and record["queued"] == [], record["check"]
    assert not [t for t in study.trials if t.user_attrs.get(records.WARM_FROM)]
    # Every worker took trials of the second study, and none wrote a record of its own.
    workers = Counter((t.user_attrs.get("owner") or {}).get("worker") for t in study.trials)
    assert set(workers) == {"gpu1", "gpu2"}, workers
    assert PASSWORD not in json.dumps(study.user_attrs)

    # From another database of the same server (--from-storage), on the same traffic: the
    # baseline agrees, and the earlier winner (or, where the winner was the baseline, what
    # its study could not tell from it) is deployed right after it.
    other = postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")
    third = _next(first, tmp_path / "third.yaml", "elsewhere", "natural", storage=other)
    run = autotune(
        "start", "--config", str(third), "--worker", "gpu1", "--n-trials", "2",
        "--from", "fleet", "--from-storage", pg_url, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "the earlier study holds here" in run.stderr
    same = status(third)["warm_start"]
    assert same["from"] == "fleet" and same["best"]["trial"] == earlier_best["trial"]
    assert same["check"]["holds"] is True, same["check"]
    assert PASSWORD not in json.dumps(same)
    elsewhere = optuna.load_study(study_name="elsewhere", storage=other)
    trials = elsewhere.trials
    baseline = st.trial_config(trials[0])
    record = elsewhere.user_attrs[records.STUDY_WARM_START]
    wanted = [c for c in warm_start.first_configs(record, 2) if c != baseline]
    assert [st.trial_config(t) for t in trials[1:]] == wanted[:1] and wanted
    assert trials[1].user_attrs.get(records.WARM_FROM)
