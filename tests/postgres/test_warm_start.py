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


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[list[SimHost]]:
    made = [SimHost(tmp_path, f"gpu{i}") for i in (1, 2)]
    yield made
    for h in made:
        h.cleanup()


def _moved(first: Path, path: Path, study: str, storage: str | None = None) -> Path:
    """The fleet's config with the traffic moved to greedy: another study, maybe elsewhere."""
    data: dict[str, Any] = yaml.safe_load(first.read_text())
    data["study"]["name"] = study
    if storage is not None:
        data["study"]["storage"] = storage
    data["benchmark"]["workload"] = "greedy"
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
    # joins the study as it is; the earlier winner is deployed right after the baseline.
    second = _moved(first, tmp_path / "second.yaml", "fleet-greedy")
    run = autotune("start", "--config", str(second), "--from", "fleet", cwd=tmp_path, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "starting from an earlier study" in run.stderr
    assert "is ignored" not in run.stderr
    s = status(second)
    assert s["warm_start"]["from"] == "fleet"
    assert s["warm_start"]["differences"] == {"workload": {"earlier": "natural", "now": "greedy"}}
    states = Counter(t["state"] for t in s["trials"])
    assert states["COMPLETE"] + states["PRUNED"] == 4 and states["RUNNING"] == 0, states

    study = optuna.load_study(study_name="fleet-greedy", storage=pg_url)
    record = study.user_attrs[records.STUDY_WARM_START]
    assert record["best"]["trial"] == earlier_best["trial"]
    queued = [t for t in study.trials if t.user_attrs.get(records.WARM_FROM)]
    baseline = st.trial_config(study.trials[0])
    wanted = [c for c in warm_start.first_configs(record, 2) if c != baseline]
    assert [st.trial_config(t) for t in queued] == wanted and wanted
    assert {t.state.name for t in queued} <= {"COMPLETE", "PRUNED"}
    # Every worker took trials of the second study, and none wrote a record of its own.
    workers = Counter((t.user_attrs.get("owner") or {}).get("worker") for t in study.trials)
    assert set(workers) == {"gpu1", "gpu2"}, workers
    assert PASSWORD not in json.dumps(study.user_attrs)

    # From another database of the same server (--from-storage): the same evidence.
    other = postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")
    third = _moved(first, tmp_path / "third.yaml", "elsewhere", storage=other)
    run = autotune(
        "start", "--config", str(third), "--worker", "gpu1", "--n-trials", "2",
        "--from", "fleet", "--from-storage", pg_url, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    moved = status(third)["warm_start"]
    assert moved["from"] == "fleet" and moved["best"]["trial"] == earlier_best["trial"]
    assert PASSWORD not in json.dumps(moved)
