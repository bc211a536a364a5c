"""optuna-dashboard on autotune studies: a real run, a real dashboard, real SQLite, real Chromium.

The module's study is written by `autotune start` (the real simulator behind a
unit file) while `autotune dashboard` polls it, as an operator watching an
overnight study would. Its space yields every kind of trial: a refused first trial,
configs below the capacity floor, feasible ones and reused results.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer, make_server

import httpx
import optuna
import optuna_dashboard
import pytest
from optuna.trial import TrialState

from autotune.commands.dashboard import (
    LEGACY_KEY,
    _QuietHandler,
    keyed_constraints,
    legacy_list,
    make_app,
    open_storage,
    serve,
    write_legacy_constraints,
)
from autotune.config import load_config
from autotune.errors import AutotuneError
from autotune.search import objective
from autotune.search import study as st
from autotune.store.storage import open_storage as open_storage_for_writing
from tests.helpers.e2e import REPO, free_port, status, stop_process, study_dir, wait_http

pytestmark = pytest.mark.slow

SPACE = {
    "params": {
        "speculative_num_steps": {"flag": "--speculative-num-steps", "choices": [2, 4]},
        "speculative_eagle_topk": {"flag": "--speculative-eagle-topk", "choices": [1, 2]},
        "speculative_num_draft_tokens": {
            "flag": "--speculative-num-draft-tokens",
            "choices": [5, 9],
        },
    }
}
# The unit's own flags serve (the unit as it is must: worker.py); trial 0 is queued before
# the study starts and is refused: 9 draft tokens > steps * topk + 1.
BASELINE_FLAGS = (
    "--speculative-num-steps 2 --speculative-eagle-topk 2 --speculative-num-draft-tokens 5"
)
REFUSED = {
    "speculative_num_steps": 2,
    "speculative_eagle_topk": 2,
    "speculative_num_draft_tokens": 9,
}
N_TRIALS = 7
ARTIFACT_SUFFIXES = ("-unit.service", "-server.log", "-benchmark.json")


@dataclass
class Polls:
    codes: list[int] = field(default_factory=list)
    trial_counts: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class LiveStudy:
    config: Path
    base: str
    study_id: int
    printed: str
    polls: Polls
    daemon_rc: int
    daemon_err: str
    dashboard_err: Callable[[], str]
    rows: dict[int, dict[str, Any]]
    """`autotune status --json` trials, by number."""


def _wait_for_study_row(db: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db.exists():
            try:
                with sqlite3.connect(db, timeout=30) as con:
                    if con.execute("select count(*) from studies").fetchone()[0]:
                        return
            except sqlite3.OperationalError:
                pass  # tables not created yet
        time.sleep(0.1)
    raise AssertionError(f"the daemon created no study in {db}")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStudy]:
    tmp = tmp_path_factory.mktemp("live")
    config = study_dir(
        tmp,
        space=SPACE,
        n_trials=N_TRIALS,
        sampler="random",
        flags=BASELINE_FLAGS,
        objective={"constraints": {"min_running_requests": 13}},
    )
    cfg = load_config(config)
    st.open_study(cfg).enqueue_trial(cfg.space.encode(REFUSED))
    env = {**os.environ, "AUTOTUNE_LOG_FORMAT": "console"}
    started: list[subprocess.Popen[Any]] = []
    logs = {name: open(tmp / f"{name}.err", "w") for name in ("daemon", "dashboard")}  # noqa: SIM115
    try:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "autotune", "start", "--config", str(config)],
            cwd=tmp,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=logs["daemon"],
            start_new_session=True,
        )
        started.append(daemon)
        _wait_for_study_row(tmp / "study.db")

        port = free_port()
        dashboard = subprocess.Popen(
            [
                *(sys.executable, "-m", "autotune", "dashboard"),
                *("--config", str(config), "--port", str(port)),
            ],
            cwd=tmp,
            env={**env, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=logs["dashboard"],
            text=True,
            start_new_session=True,
        )
        started.append(dashboard)
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/api/meta", dashboard)
        assert dashboard.stdout is not None
        printed = dashboard.stdout.readline()

        # Poll the way the browser does while the daemon records trials.
        polls = Polls()
        study_id = 0
        with httpx.Client(base_url=base, timeout=60) as client:
            while daemon.poll() is None:
                try:
                    summaries = client.get("/api/studies")
                    polls.codes.append(summaries.status_code)
                    for s in summaries.json().get("study_summaries", []):
                        study_id = int(s["study_id"])
                    if study_id:
                        detail = client.get(f"/api/studies/{study_id}")
                        polls.codes.append(detail.status_code)
                        if detail.status_code == 200:
                            polls.trial_counts.append(len(detail.json()["trials"]))
                except (httpx.HTTPError, ValueError) as exc:
                    polls.errors.append(repr(exc))
                time.sleep(0.05)
        daemon.wait(timeout=120)
        yield LiveStudy(
            config=config,
            base=base,
            study_id=study_id,
            printed=printed,
            polls=polls,
            daemon_rc=daemon.returncode,
            daemon_err=(tmp / "daemon.err").read_text(),
            dashboard_err=lambda: (tmp / "dashboard.err").read_text(),
            rows={r["number"]: r for r in status(config)["trials"]},
        )
    finally:
        for proc in reversed(started):
            stop_process(proc)
        for f in logs.values():
            f.close()


# -- the live study ---------------------------------------------------------------------
def test_dashboard_read_the_study_while_the_daemon_wrote_it(live: LiveStudy) -> None:
    assert live.daemon_rc == 0, live.daemon_err[-3000:]
    assert f"{live.base}/dashboard/studies/{live.study_id}" in live.printed
    assert live.polls.errors == []
    assert len(live.polls.codes) > 20
    assert set(live.polls.codes) == {200}
    # It really watched the study grow, not just the finished file.
    assert len(set(live.polls.trial_counts)) >= 3, live.polls.trial_counts
    for text in (live.daemon_err, live.dashboard_err()):
        assert "database is locked" not in text
        assert "Traceback" not in text


def _detail(live: LiveStudy) -> dict[str, Any]:
    """The study detail once the dashboard has caught up with the finished study.

    optuna-dashboard keeps a trial it last saw running for up to a few seconds (its
    trial cache), so a read right after the daemon's exit may still say "Running".
    """
    deadline = time.monotonic() + 15
    while True:
        r = httpx.get(f"{live.base}/api/studies/{live.study_id}", timeout=30)
        assert r.status_code == 200
        body = r.json()
        if all(t["state"] != "Running" for t in body["trials"]) or time.monotonic() > deadline:
            return body
        time.sleep(0.5)


def _attrs(serialized: dict[str, Any]) -> dict[str, str]:
    return {a["key"]: a["value"] for a in serialized["user_attrs"]}


def test_api_has_every_trial_with_its_attributes_and_feasibility(live: LiveStudy) -> None:
    rows = live.rows
    detail = _detail(live)
    trials = {t["number"]: t for t in detail["trials"]}
    assert sorted(trials) == sorted(rows) == list(range(N_TRIALS))
    assert {r["feasible"] for r in rows.values()} == {True, False}
    assert {r["failure"] for r in rows.values()} >= {"capacity", None}
    assert any(r["reused_from"] is not None for r in rows.values())

    for n, t in trials.items():
        row = rows[n]
        attrs = _attrs(t)
        assert t["state"] == "Complete"
        assert {"config", "feasible", "workload"} <= set(attrs)
        if n != 0:  # every server but the refused baseline's came up and said what it ran
            assert json.loads(attrs["resolved"]) == row["config"]
        assert attrs["feasible"] == str(row["feasible"])
        # What optuna-dashboard 0.21 judges feasibility by: every value <= 0.
        assert len(t["constraints"]) == len(objective.CONSTRAINT_KEYS)
        assert all(v <= 0 for v in t["constraints"]) == row["feasible"], (n, t["constraints"])
        if not row["feasible"]:
            assert attrs["reason"] == row["reason"]
        elif row["reused_from"] is None:
            for c in (1, 4):
                assert float(attrs[f"output_tok_s@c{c}"]) > 0
            # optuna-dashboard cuts JSON attributes at 1024 characters: `levels` is cut.
            assert attrs["levels"].startswith('[{"concurrency": 1, ')
    refused = trials[0]
    assert _attrs(refused)["failure"] in ("refused", "crash_on_start")
    assert refused["constraints"][objective.CONSTRAINT_KEYS.index(objective.SERVER_UP)] > 0

    best = json.loads(
        subprocess.run(
            [sys.executable, "-m", "autotune", "best", "--json", "--config", str(live.config)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert [t["number"] for t in detail["best_trials"]] == [best["trial"]]


def test_api_serves_each_trials_files(live: LiveStudy) -> None:
    rows = live.rows
    with httpx.Client(base_url=live.base, timeout=30) as client:
        for t in _detail(live)["trials"]:
            n, row = t["number"], rows[t["number"]]
            names = sorted(a["filename"] for a in t["artifacts"])
            if row["reused_from"] is not None:
                assert names == []  # a reused result deployed nothing
                continue
            assert names == sorted(f"trial-{n}{s}" for s in ARTIFACT_SUFFIXES)
            files = {}
            for a in t["artifacts"]:
                r = client.get(f"/artifacts/{live.study_id}/{t['trial_id']}/{a['artifact_id']}")
                assert r.status_code == 200, a
                files[a["filename"].removeprefix(f"trial-{n}-")] = r.text
            steps = row["config"]["speculative_num_steps"]
            assert f"--speculative-num-steps {steps}" in files["unit.service"]
            assert files["server.log"].strip()
            assert json.loads(files["benchmark.json"])["feasible"] == row["feasible"]
            if n == 0:  # refused: the server's own words are in its log
                assert "speculative_num_draft_tokens = 9" in files["server.log"]


def test_plain_optuna_dashboard_sees_feasibility_too(
    live: LiveStudy, wsgi_server: Callable[[Any], str]
) -> None:
    """Without autotune's plugin: the list form the study recorded is what it reads."""
    upstream = wsgi_server(optuna_dashboard.wsgi(load_config(live.config).study.storage))
    for t in _detail_of(upstream, n_trials=N_TRIALS, study_id=live.study_id)["trials"]:
        row = live.rows[t["number"]]
        assert len(t["constraints"]) == len(objective.CONSTRAINT_KEYS)
        assert all(v <= 0 for v in t["constraints"]) == row["feasible"], t["number"]


def test_study_db_is_in_wal_mode_so_readers_never_block_the_daemon(tmp_path: Path) -> None:
    db = tmp_path / "wal.db"
    open_storage_for_writing(f"sqlite:///{db}")
    with sqlite3.connect(db) as con:
        assert con.execute("pragma journal_mode").fetchone()[0] == "wal"
    reader = sqlite3.connect(db, isolation_level=None)
    writer = sqlite3.connect(db, timeout=0.2, isolation_level=None)
    try:
        reader.execute("begin")
        reader.execute("select count(*) from studies").fetchone()  # holds a read snapshot
        # In rollback-journal mode this commit waits for the reader, then fails as locked.
        writer.execute("insert into studies (study_name) values ('written while read')")
    finally:
        reader.close()
        writer.close()


# -- in a real browser ---------------------------------------------------------------------
def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (apt-get install -y chromium)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return exe


def dump_dom(url: str, tmp: Path) -> str:
    """The page's DOM after its scripts ran, from headless Chromium."""
    profile = tmp / f"chromium-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=90)
    finally:
        stop_process(proc)
    assert proc.returncode == 0, proc.returncode
    return out


def _text(dom: str) -> str:
    import html

    text = re.sub(r"<style.*?</style>|<script.*?</script>", " ", dom, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text)))


def _timeline_bars(dom: str) -> dict[str, int]:
    """Bars of the study page's Timeline plot by fill colour (plotly draws them as SVG)."""
    start = dom.index('id="graph-timeline"')
    following = re.compile(r'id="(graph|plot)-').search(dom, start + 1)
    seg = dom[start : following.start() if following else len(dom)]
    counts: dict[str, int] = {}
    for trace in re.findall(r'<g class="trace bars".*?</g></g>', seg, re.S):
        for fill in re.findall(r'class="point"><path[^>]*fill: (rgb\([^)]*\))', trace):
            counts[fill] = counts.get(fill, 0) + 1
    return counts


def test_browser_shows_infeasible_trials_as_infeasible(live: LiveStudy, tmp_path: Path) -> None:
    rows = list(live.rows.values())
    infeasible = [r["number"] for r in rows if not r["feasible"]]
    best = st.best_trials(st.open_study(load_config(live.config), create=False))[0].number

    dom = dump_dom(f"{live.base}/dashboard/studies/{live.study_id}", tmp_path)
    text = _text(dom)
    assert "e2e" in text and "History" in text
    assert f"Best Trial (number={best})" in text
    legend = re.findall(r'class="legendtext"[^>]*>([^<]*)<', dom[dom.index("graph-timeline") :])
    assert "Infeasible" in legend, legend
    # optuna-dashboard greys infeasible trials out (#cccccc): one grey bar per infeasible trial.
    bars = _timeline_bars(dom)
    assert bars.get("rgb(204, 204, 204)") == len(infeasible), bars
    assert sum(bars.values()) == len(rows)


def test_browser_shows_a_trials_attributes_and_files(live: LiveStudy, tmp_path: Path) -> None:
    rows = list(live.rows.values())
    capacity = next(r for r in rows if r["failure"] == "capacity" and r["reused_from"] is None)
    n = capacity["number"]
    dom = dump_dom(f"{live.base}/dashboard/studies/{live.study_id}/trials?numbers={n}", tmp_path)
    text = _text(dom)
    assert f"Trial {n} (trial_id=" in text
    assert "User Attributes" in text
    assert "feasible False" in text
    assert capacity["reason"] in text
    assert "Artifacts" in text
    for suffix in ARTIFACT_SUFFIXES:
        assert f"trial-{n}{suffix}" in text
    assert "Best Trial" not in text.split("User Attributes")[0].split(f"Trial {n} (trial_id=")[1]


# -- the best trial and the list form, on hand-made studies ----------------------------------
def _record(
    study: optuna.Study, value: float | list[float], constraints: dict[str, float], legacy: bool
) -> None:
    trial = study.ask()
    trial.suggest_int("x", 0, 10)
    for key, v in constraints.items():
        trial.set_constraint(key, v)
    if legacy:
        write_legacy_constraints(study, trial._trial_id, constraints)
    study.tell(trial, value)


def _constraints(**violations: float) -> dict[str, float]:
    return {k: violations.get(k, 0.0) for k in objective.CONSTRAINT_KEYS}


@pytest.fixture
def wsgi_server() -> Iterator[Callable[[Any], str]]:
    """Serve WSGI apps on 127.0.0.1 from threads of this process; shut them down after."""
    servers: list[tuple[WSGIServer, threading.Thread]] = []

    def start(app: Any) -> str:
        server = make_server("127.0.0.1", 0, app, handler_class=_QuietHandler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append((server, thread))
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server, thread in servers:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _detail_of(base: str, n_trials: int, study_id: int = 1) -> dict[str, Any]:
    """The study detail once it lists `n_trials`: optuna-dashboard caches trials for 2 s."""
    deadline = time.monotonic() + 10
    while True:
        detail = httpx.get(f"{base}/api/studies/{study_id}", timeout=30).json()
        if len(detail["trials"]) == n_trials or time.monotonic() > deadline:
            return detail
        time.sleep(0.2)


def _best_numbers(base: str, study_id: int = 1) -> list[int]:
    r = httpx.get(f"{base}/api/studies/{study_id}", timeout=30)
    assert r.status_code == 200, r.text
    return [t["number"] for t in r.json()["best_trials"]]


def test_best_trial_is_never_an_infeasible_one(
    tmp_path: Path, wsgi_server: Callable[[Any], str]
) -> None:
    url = f"sqlite:///{tmp_path / 'hand.db'}"
    study = optuna.create_study(study_name="hand", storage=url, direction="maximize")
    # A config that ran and was fast but broke the latency ceiling: the highest value.
    _record(study, 900.0, _constraints(ttft_p99_ms=250.0), legacy=False)
    storage = open_storage(url)
    ours = wsgi_server(make_app(storage, None))
    upstream = wsgi_server(optuna_dashboard.wsgi(url))

    assert _best_numbers(upstream) == [0]  # optuna-dashboard 0.21 as released badges it
    assert _best_numbers(ours) == []  # nothing is feasible yet

    _record(study, 500.0, _constraints(min_running_requests=-4.0), legacy=False)
    _record(study, 0.0, _constraints(server_up=1.0, min_running_requests=1.0), legacy=False)
    assert study.best_trial.number == 1
    assert _best_numbers(upstream) == [0]
    assert _best_numbers(ours) == [1]

    detail = _detail_of(ours, n_trials=3)
    assert [t["constraints"] for t in detail["trials"]] == [
        legacy_list(_constraints(ttft_p99_ms=250.0)),
        legacy_list(_constraints(min_running_requests=-4.0)),
        legacy_list(_constraints(server_up=1.0, min_running_requests=1.0)),
    ]
    assert detail["best_trials"][0]["constraints"] == legacy_list(
        _constraints(min_running_requests=-4.0)
    )


def test_pareto_front_has_only_feasible_trials(
    tmp_path: Path, wsgi_server: Callable[[Any], str]
) -> None:
    url = f"sqlite:///{tmp_path / 'pareto.db'}"
    study = optuna.create_study(
        study_name="pareto", storage=url, directions=["maximize", "maximize"]
    )
    _record(study, [300.0, 900.0], _constraints(ttft_p99_ms=5.0), legacy=True)  # infeasible
    _record(study, [200.0, 700.0], _constraints(), legacy=True)
    _record(study, [250.0, 600.0], _constraints(), legacy=True)
    _record(study, [100.0, 500.0], _constraints(), legacy=True)  # dominated
    ours = wsgi_server(make_app(open_storage(url), None))
    assert sorted(_best_numbers(ours)) == [1, 2]
    assert sorted(t.number for t in study.best_trials) == [1, 2]


def test_list_form_keeps_optuna_best_trial_and_tpe_unchanged(
    tmp_path: Path, wsgi_server: Callable[[Any], str]
) -> None:
    """Two studies with the same history, one also holding the list form, propose the same."""
    history = [
        (120.0, _constraints()),
        (0.0, _constraints(server_up=1.0, min_running_requests=1.0)),
        (150.0, _constraints(ttft_p99_ms=30.0)),
        (0.0, _constraints(min_running_requests=6.0)),
        (90.0, _constraints(min_running_requests=-2.0)),
        (0.0, _constraints(min_running_requests=2.0)),
        (130.0, _constraints(itl_p50_ms=0.5)),
        (110.0, _constraints()),
    ]
    studies = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for legacy in (False, True):
            study = optuna.create_study(
                study_name="tpe",
                storage=f"sqlite:///{tmp_path / f'tpe-{legacy}.db'}",
                direction="maximize",
                sampler=optuna.samplers.TPESampler(seed=1, n_startup_trials=4, multivariate=True),
            )
            for i, (value, constraints) in enumerate(history):
                study.enqueue_trial({"x": i % 11, "y": float(i) / 8})
                trial = study.ask()
                trial.suggest_int("x", 0, 10)
                trial.suggest_float("y", 0.0, 1.0)
                for key, v in constraints.items():
                    trial.set_constraint(key, v)
                if legacy:
                    write_legacy_constraints(study, trial._trial_id, constraints)
                study.tell(trial, value)
            studies[legacy] = study
        proposals = {}
        for legacy, study in studies.items():
            out = []
            for _ in range(4):
                trial = study.ask()
                out.append((trial.suggest_int("x", 0, 10), trial.suggest_float("y", 0.0, 1.0)))
                study.tell(trial, state=TrialState.FAIL)
            proposals[legacy] = out
    assert not [w for w in caught if "constraint" in str(w.message).lower()], caught

    plain, legacy_study = studies[False], studies[True]
    assert plain.best_trial.number == legacy_study.best_trial.number == 0
    assert [st.is_feasible(t) for t in plain.trials[:8]] == [
        st.is_feasible(t) for t in legacy_study.trials[:8]
    ]
    assert proposals[True] == proposals[False]

    frozen = legacy_study.trials[2]
    assert frozen.system_attrs[LEGACY_KEY] == legacy_list(history[2][1])
    assert keyed_constraints(frozen) == history[2][1]  # without the list's "0", "1", ...
    n = len(objective.CONSTRAINT_KEYS)
    assert set(frozen.constraints) == {*objective.CONSTRAINT_KEYS, *map(str, range(n))}

    # A plain optuna-dashboard reads the list form: no plugin needed to see feasibility.
    upstream = wsgi_server(optuna_dashboard.wsgi(f"sqlite:///{tmp_path / 'tpe-True.db'}"))
    detail = _detail_of(upstream, n_trials=len(legacy_study.trials))
    feasible = [all(v <= 0 for v in t["constraints"]) for t in detail["trials"][:8]]
    assert feasible == [st.is_feasible(t) for t in legacy_study.trials[:8]]


def test_legacy_list_order_follows_the_constraint_keys() -> None:
    assert legacy_list({"itl_p50_ms": 4.0, "zeta": 9.0, "server_up": 1.0, "alpha": 8.0}) == [
        1.0,
        4.0,
        8.0,
        9.0,
    ]
    assert legacy_list({}) == []


def test_serve_refuses_a_missing_database_and_a_busy_port(tmp_path: Path) -> None:
    config = study_dir(tmp_path)
    cfg = load_config(config)
    with pytest.raises(AutotuneError, match="no study database"):
        serve(cfg, free_port())
    assert not (tmp_path / "study.db").exists()  # looking created nothing

    optuna.create_study(study_name="e2e", storage=cfg.study.storage)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(AutotuneError, match="cannot listen"):
            serve(cfg, busy.getsockname()[1])


def test_dashboard_shows_draft_tokens_not_the_stored_fraction(
    tmp_path: Path, wsgi_server: Callable[[Any], str]
) -> None:
    from autotune.commands.dashboard import show_knobs
    from autotune.space import load_space

    space = load_space(REPO / "search_spaces" / "sglang-eagle.yaml")
    url = f"sqlite:///{tmp_path / 'knobs.db'}"
    study = optuna.create_study(study_name="knobs", storage=url, direction="maximize")
    configs = [(2, 1, 3), (3, 4, 9), (4, 4, 13), (5, 8, 32), (6, 2, 11), (7, 4, 20)]
    for i, (steps, topk, draft) in enumerate(configs):
        params = space.encode(
            {
                "speculative_num_steps": steps,
                "speculative_eagle_topk": topk,
                "speculative_num_draft_tokens": draft,
            }
        )
        assert "speculative_num_draft_tokens_frac" in params  # what the study stores
        study.add_trial(
            optuna.trial.create_trial(
                params=params, distributions=space.distributions(), value=100.0 + 10 * i
            )
        )
    storage = open_storage(url)
    show_knobs(storage, space)
    base = wsgi_server(make_app(storage, None))

    detail = _detail_of(base, n_trials=len(configs))
    for t, (steps, topk, draft) in zip(detail["trials"], configs, strict=True):
        shown = {p["name"]: p["param_external_value"] for p in t["params"]}
        assert shown == {
            "speculative_num_steps": str(steps),
            "speculative_eagle_topk": str(topk),
            "speculative_num_draft_tokens": str(draft),
        }
    names = {p["name"] for p in detail["union_search_space"]}
    assert names == {
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
    }
    # optuna-dashboard caches importances per process by "study id:objective" and trial
    # count: another test's study 1 with as many trials would answer for this one.
    from optuna_dashboard import _importance

    _importance.param_importance_cache.clear()
    r = httpx.get(f"{base}/api/studies/1/param_importances", timeout=60)
    assert r.status_code == 200, r.text
    (per_objective,) = r.json()["param_importances"]
    assert {p["name"] for p in per_objective} == names
    # The study itself still holds the fraction: the dashboard only reads it decoded.
    assert "speculative_num_draft_tokens_frac" in study.trials[0].params
