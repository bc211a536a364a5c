"""Several hosts, one study, on a real PostgreSQL: workers, exact totals, recovery, artifacts.

Every host is a stand-in systemd host running the real simulator; every
worker is a real `autotune start` process; the database is a real PostgreSQL
server started by the fixtures (autotune/testservers/postgres.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import optuna
import pytest

from autotune.store.artifacts import DatabaseArtifactStore
from autotune.testservers.postgres import PASSWORD, PostgresServer
from tests.helpers.daemon import Daemon
from tests.helpers.e2e import autotune, free_port, status, stop_process, wait_http
from tests.postgres.hosts import SimHost, workers_config

pytestmark = pytest.mark.slow


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[list[SimHost]]:
    made = [SimHost(tmp_path, f"gpu{i}") for i in (1, 2, 3)]
    yield made
    for h in made:
        h.cleanup()


def _served(host: SimHost) -> dict[str, Any]:
    return httpx.get(f"http://127.0.0.1:{host.port}/get_server_info", timeout=10).json()


#: A pruned trial (stopped after a level it could not win from) is finished and deployed.
FINISHED = ("COMPLETE", "PRUNED")


def _measured(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [t for t in trials if t["state"] in FINISHED and t["reused_from"] is None]


def _assert_exact_and_no_twice(trials: list[dict[str, Any]], n_trials: int) -> None:
    states = Counter(t["state"] for t in trials)
    assert states["COMPLETE"] + states["PRUNED"] == n_trials, states
    assert states["RUNNING"] == 0 and states["WAITING"] == 0, states
    configs = [json.dumps(t["config"], sort_keys=True) for t in _measured(trials)]
    assert len(configs) == len(set(configs)), f"a config was deployed twice: {configs}"


def _optuna_study(url: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=url)


def _finished_by(study: optuna.Study, key: str) -> Counter[Any]:
    """Finished trials per owner `key` (worker name, pid): who did the work."""
    return Counter(
        (t.user_attrs.get("owner") or {}).get(key)
        for t in study.get_trials(deepcopy=False)
        if t.state.name in FINISHED
    )


def test_one_config_three_hosts_shares_one_study(
    tmp_path: Path, hosts: list[SimHost], pg_url: str, pg_env: dict[str, str]
) -> None:
    n_trials = 9
    config = workers_config(
        tmp_path / "autotune.yaml", pg_url, hosts, n_trials=n_trials, finalists=2
    )
    run = autotune("start", "--config", str(config), cwd=tmp_path, timeout=400)
    problems = [line for line in run.stderr.splitlines() if "error" in line or "warn" in line]
    assert run.returncode == 0, "\n".join(problems) or run.stderr[-4000:]
    log = run.stderr
    assert "Traceback" not in log

    trials = status(config)["trials"]
    _assert_exact_and_no_twice(trials, n_trials)
    study = _optuna_study(pg_url, "fleet")
    by_worker = _finished_by(study, "worker")
    assert set(by_worker) == {"gpu1", "gpu2", "gpu3"}, by_worker  # every host took trials

    # The finalists ran once, on one worker; every host ends on the declared best.
    assert log.count("validating finalists") == 1, log[-3000:]
    best = json.loads(autotune("best", "--json", "--config", str(config), cwd=tmp_path).stdout)
    assert best["chosen_by"].startswith("best after the finalists were measured again")
    for h in hosts:
        info = _served(h)
        assert {k: info[k] for k in best["resolved"]} == best["resolved"], h.name

    # Every measured trial's files are in the database, whichever worker wrote them.
    store = DatabaseArtifactStore(study._storage._backend.engine)
    for t in study.get_trials(deepcopy=False):
        if t.state != optuna.trial.TrialState.COMPLETE or t.user_attrs.get("reused_from"):
            continue
        metas = optuna.artifacts.get_all_artifact_meta(t, storage=study._storage)
        names = sorted(m.filename.split("-", 2)[-1] for m in metas)
        assert names == ["benchmark.json", "server.log", "unit.service"], (t.number, names)
        with store.open_reader(metas[0].artifact_id) as f:
            assert f.read()

    # The password came from PGPASSWORD and is nowhere a person or the study can see.
    assert PASSWORD not in log
    assert PASSWORD not in json.dumps(study.user_attrs)
    report = autotune("report", "--config", str(config), "--out", str(tmp_path), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    html = Path(report.stdout.strip()).read_text()
    assert "gpu" in html or "trial" in html
    assert PASSWORD not in html
    text_status = autotune("status", "--config", str(config), cwd=tmp_path)
    assert text_status.returncode == 0 and PASSWORD not in text_status.stdout


def test_the_dashboard_shows_a_postgresql_study_and_its_files(
    tmp_path: Path, hosts: list[SimHost], pg_url: str, pg_env: dict[str, str]
) -> None:
    config = workers_config(tmp_path / "autotune.yaml", pg_url, hosts[:2], n_trials=3)
    run = autotune("start", "--config", str(config), cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    port = free_port()
    dash = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autotune",
            "dashboard",
            "--config",
            str(config),
            "--port",
            str(port),
        ],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/api/studies/1", dash, timeout=60)
        detail = httpx.get(f"{base}/api/studies/1", timeout=10)
        body = detail.json()
        assert len(body["trials"]) == 3
        assert body["best_trials"], "autotune's plugin names the best feasible trial"
        measured = [t for t in body["trials"] if t["artifacts"]]
        assert measured, "no trial shows its files"
        t = measured[0]
        art = t["artifacts"][0]
        got = httpx.get(f"{base}/artifacts/1/{t['trial_id']}/{art['artifact_id']}", timeout=10)
        assert got.status_code == 200 and got.content
        assert PASSWORD not in detail.text
    finally:
        stop_process(dash)


def test_a_worker_killed_on_another_host_is_recovered_by_the_others(
    tmp_path: Path, hosts: list[SimHost], pg_url: str, pg_env: dict[str, str]
) -> None:
    """kill -9 of a worker mid-benchmark; it ran under another host name (its own UTS
    namespace), so the survivors can judge it only by its heartbeat, after the grace."""
    n_trials = 7
    config = workers_config(tmp_path / "autotune.yaml", pg_url, hosts, n_trials=n_trials)
    elsewhere = ("unshare", "--uts", "sh", "-c", 'hostname other-box && exec "$@"', "sh")
    victim = Daemon("--config", str(config), "--worker", "gpu1", cwd=tmp_path, prefix=elsewhere)
    others: list[Daemon] = []
    try:
        victim.wait_for("trial ", "benchmarking", timeout=120)
        others = [
            Daemon("--config", str(config), "--worker", name, cwd=tmp_path)
            for name in ("gpu2", "gpu3")
        ]
        victim.kill()
        for d in others:
            assert d.wait(timeout=400) == 0, d.log[-4000:]
    finally:
        victim.kill()
        for d in others:
            d.kill()
    trials = status(config)["trials"]
    _assert_exact_and_no_twice(trials, n_trials)
    killed = [t for t in trials if t["state"] == "FAIL"]
    assert len(killed) == 1 and killed[0]["failure"] == "daemon_died", killed
    assert "stopped beating" in (killed[0]["reason"] or "")
    again = [t for t in _measured(trials) if t["params"] == killed[0]["params"]]
    assert len(again) == 1, "the killed trial's config is measured once, by a survivor"
    assert any("recovered trials whose daemon died" in d.log for d in others)


def test_a_second_worker_joins_a_running_study_and_the_total_holds(
    tmp_path: Path, hosts: list[SimHost], pg_url: str, pg_env: dict[str, str]
) -> None:
    """Two separate `autotune start`s (one per host) on the same study, started apart."""
    n_trials = 5
    config = workers_config(tmp_path / "autotune.yaml", pg_url, hosts[:2], n_trials=n_trials)
    first = Daemon("--config", str(config), "--worker", "gpu1", cwd=tmp_path)
    second: Daemon | None = None
    try:
        first.wait_for("trial 1 of 5", timeout=120)
        second = Daemon("--config", str(config), "--worker", "gpu2", cwd=tmp_path)
        assert first.wait(timeout=300) == 0, first.log[-3000:]
        assert second.wait(timeout=300) == 0, second.log[-3000:]
    finally:
        first.kill()
        if second is not None:
            second.kill()
    _assert_exact_and_no_twice(status(config)["trials"], n_trials)
    assert "trial done" in second.log  # it took a share, not just waited


def test_the_database_going_away_mid_study_is_waited_out(
    tmp_path: Path, hosts: list[SimHost], pg_env: dict[str, str]
) -> None:
    server = PostgresServer()  # its own server: this test stops it
    try:
        url = server.create_database("dropped")
        n_trials = 4
        config = workers_config(
            tmp_path / "autotune.yaml", url, hosts[:1], n_trials=n_trials, grace=60
        )
        worker = Daemon("--config", str(config), "--worker", "gpu1", cwd=tmp_path)
        try:
            worker.wait_for("trial 2 of 4", "benchmarking", timeout=120)
            server.stop()
            # Down until the worker has met the outage (its next write: the trial's record or
            # a heartbeat), however fast this machine runs the rest of the trial.
            deadline = time.monotonic() + 120
            while not (
                "the study database does not answer" in worker.log
                or "heartbeat failed" in worker.log
            ):
                assert time.monotonic() < deadline, worker.log[-3000:]
                assert worker.proc.poll() is None, worker.log[-3000:]
                time.sleep(0.2)
            time.sleep(2)
            server.start()
            assert worker.wait(timeout=300) == 0, worker.log[-4000:]
        finally:
            worker.kill()
        trials = status(config)["trials"]
        _assert_exact_and_no_twice(trials, n_trials)
        assert not [t for t in trials if t["state"] == "FAIL"], "nothing lost to the outage"
    finally:
        server.close()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgresql+psycopg://autotune@127.0.0.1:{closed}/x", "Connection refused"),
        ("postgresql+psycopg://autotune:wrong-pass@127.0.0.1:{port}/postgres", "password"),
        ("postgresql+psycopg://autotune:${AUTOTUNE_TEST_UNSET}@127.0.0.1:{port}/x", "is not set"),
    ],
)
def test_a_database_that_cannot_be_used_is_one_line_before_anything_is_deployed(
    tmp_path: Path, hosts: list[SimHost], postgres: PostgresServer, url: str, says: str
) -> None:
    url = url.replace("{closed}", str(free_port())).replace("{port}", str(postgres.port))
    config = workers_config(tmp_path / "autotune.yaml", url, hosts[:1], n_trials=2)
    unit = hosts[0].systemd.unit_path("sglang-sim.service")
    before = (unit.read_text(), unit.stat().st_mtime_ns)
    run = autotune("start", "--config", str(config), cwd=tmp_path, timeout=60)
    assert run.returncode == 2, run.stderr
    lines = [line for line in run.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and "study.storage" in lines[0] and says in lines[0], run.stderr
    assert "Traceback" not in run.stderr
    assert "wrong-pass" not in run.stderr  # a password written in the URL is shown as ***
    assert (unit.read_text(), unit.stat().st_mtime_ns) == before  # nothing was deployed


def test_the_url_may_take_its_password_from_any_variable(
    tmp_path: Path, hosts: list[SimHost], pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("TUNER_DB_PASSWORD", PASSWORD)
    url = pg_url.replace("autotune@", "autotune:${TUNER_DB_PASSWORD}@")
    config = workers_config(tmp_path / "autotune.yaml", url, hosts[:1], n_trials=1)
    run = autotune("start", "--config", str(config), cwd=tmp_path, timeout=200)
    assert run.returncode == 0, run.stderr[-3000:]
    assert PASSWORD not in run.stderr
    study = _optuna_study(pg_url.replace("autotune@", f"autotune:{PASSWORD}@"), "fleet")
    assert PASSWORD not in json.dumps(study.user_attrs)
    assert "autotune:***@" in json.dumps(study.user_attrs)
    assert os.environ.get("PGPASSWORD") is None


def test_a_host_that_goes_down_takes_only_its_own_worker_out(
    tmp_path: Path, hosts: list[SimHost], pg_url: str, pg_env: dict[str, str]
) -> None:
    """gpu1's systemctl disappears mid-study: its worker waits target.infra_timeout, gives up
    with one line; its interrupted config is measured by gpu2, which finishes the budget."""
    n_trials = 5
    config = workers_config(tmp_path / "autotune.yaml", pg_url, hosts[:2], n_trials=n_trials)
    text = config.read_text().replace("infra_timeout: 120", "infra_timeout: 6")
    config.write_text(text)
    down = Daemon("--config", str(config), "--worker", "gpu1", cwd=tmp_path)
    up: Daemon | None = None
    systemctl = Path(hosts[0].systemd.systemctl)
    try:
        down.wait_for("trial 1 of 5", "benchmarking", timeout=120)
        up = Daemon("--config", str(config), "--worker", "gpu2", cwd=tmp_path)
        systemctl.rename(systemctl.with_name("systemctl.gone"))  # the host stops answering
        assert down.wait(timeout=200) == 1, down.log[-3000:]
        assert up.wait(timeout=300) == 0, up.log[-3000:]
    finally:
        down.kill()
        if up is not None:
            up.kill()
        if not systemctl.exists():
            systemctl.with_name("systemctl.gone").rename(systemctl)  # so cleanup can stop it
    errors = [line for line in down.log.splitlines() if line.startswith("autotune: error")]
    assert len(errors) == 1 and "unreachable for 6 s" in errors[0], down.log[-3000:]
    assert "Traceback" not in down.log
    trials = status(config)["trials"]
    _assert_exact_and_no_twice(trials, n_trials)
    failed = [t for t in trials if t["state"] == "FAIL"]
    assert failed and all(t["failure"] == "infrastructure" for t in failed), failed
    for t in failed:  # each config the host could not run was measured by the other
        assert [m for m in _measured(trials) if m["params"] == t["params"]], t


def test_three_configs_in_one_folder_drive_three_local_servers(
    tmp_path: Path, pg_url: str, pg_env: dict[str, str]
) -> None:
    """One worker per server, not per folder: three configs side by side, each with its
    own unit and port, share one study; a fourth config for a server already driven is
    refused, naming that server."""
    import yaml

    from tests.helpers.e2e import sim_unit

    n_trials = 6
    configs = []
    for i in (1, 2, 3):
        port = free_port()
        (tmp_path / f"sim{i}.service").write_text(
            sim_unit(
                port,
                "--speculative-num-steps 3 --speculative-eagle-topk 1 "
                "--speculative-num-draft-tokens 4",
            )
        )
        path = tmp_path / f"sim{i}.yaml"
        path.write_text(yaml.safe_dump({
            "study": {"name": "side-by-side", "storage": pg_url, "n_trials": n_trials, "seed": i},
            "target": {"unit_file": f"sim{i}.service", "base_url": f"http://127.0.0.1:{port}",
                       "ready_timeout": 60},
            "search_space": "sglang-mtp.yaml",
            "benchmark": {"concurrency": [1, 4], "workload": "natural", "max_tokens": 64,
                          "min_duration": 1.0, "max_duration": 1.5, "warmup_requests": 1,
                          "finalists": 0},
            "objective": {"constraints": {"min_running_requests": 4}},
        }, sort_keys=False))  # fmt: skip
        configs.append(path)
    workers = [Daemon("--config", str(c), cwd=tmp_path) for c in configs]
    try:
        workers[0].wait_for("trial ")
        # Another config for sim1's server (same address, another unit file): refused.
        twin = tmp_path / "twin.yaml"
        twin.write_text(configs[0].read_text().replace("sim1.service", "sim2.service"))
        refused = autotune("start", "--config", str(twin), cwd=tmp_path, timeout=60)
        assert refused.returncode == 1, refused.stderr
        line = next(ln for ln in refused.stderr.splitlines() if "already driven" in ln)
        url = yaml.safe_load(configs[0].read_text())["target"]["base_url"]
        assert f"the server at {url}" in line and f"pid {workers[0].proc.pid}" in line
        assert "Traceback" not in refused.stderr
        for w in workers:
            assert w.wait(timeout=400) == 0, w.log[-3000:]
    finally:
        for w in workers:
            w.kill()
    trials = status(configs[0])["trials"]
    _assert_exact_and_no_twice(trials, n_trials)
    pids = _finished_by(_optuna_study(pg_url, "side-by-side"), "pid")
    assert set(pids) == {w.proc.pid for w in workers}, pids  # all three ran trials
