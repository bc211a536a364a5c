"""Bad input gets one clear line naming file, key and value, and exit code 2 — never a traceback."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from autotune import cli
from autotune.config import load_config
from autotune.search import gp
from autotune.search.study import make_sampler

REPO = Path(__file__).resolve().parent.parent
UNIT = (REPO / "examples" / "sglang-sim.service").read_text()


def _base() -> dict:
    return {
        "study": {"name": "t", "storage": "sqlite:///t.db", "n_trials": 5},
        "target": {"unit_file": "sim.service", "base_url": "http://127.0.0.1:30000"},
        "search_space": "sglang-eagle.yaml",
        "benchmark": {"concurrency": [1, 16]},
        "objective": {"constraints": {"min_running_requests": 16}},
    }


def _write(tmp_path: Path, data: dict | str, unit: str = UNIT) -> Path:
    (tmp_path / "sim.service").write_text(unit)
    path = tmp_path / "autotune.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def _validate(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["validate", "--config", str(path)])
    err = capsys.readouterr().err.strip()
    return code, err


def test_good_config_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["validate", "--config", str(_write(tmp_path, _base()))])
    out = capsys.readouterr().out
    assert code == 0
    assert "427 configs" in out


def test_demo_config_loads() -> None:
    cfg = load_config(REPO / "examples" / "demo.yaml")
    assert cfg.benchmark.concurrency == (1, 16, 64)
    assert cfg.benchmark.workload == "natural"
    assert cfg.objective.mode == "geomean"
    assert cfg.objective.constraints.min_running_requests == 16
    assert cfg.target.unit_file.is_file()


def _set(data: dict, dotted: str, value: object) -> dict:
    node = data
    *parents, last = dotted.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    if value is _DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return data


_DELETE = object()

# (key path to change, new value, text the one error line must contain)
BAD_INPUT = [
    ("study.n_trials", "ten", "study.n_trials: must be a whole number, got str 'ten'"),
    ("study.n_trials", 0, "study.n_trials: must be at least 1, got 0"),
    (
        "study.sampler",
        "cmaes",
        "study.sampler: must be one of auto, gp, tpe, random, optuna-gp; got 'cmaes'",
    ),
    ("study.storage", "autotune.db", "study.storage: must be a URL like sqlite:///autotune.db"),
    ("study.colour", "blue", "study.colour: unknown key"),
    ("target.deploy", "kubernetes", "target.deploy: must be one of local-process"),
    ("target.engine", "tgi", "target.engine: must be one of sglang, llama.cpp, vllm; got 'tgi'"),
    ("target.unit_file", "missing.service", "target.unit_file: file not found"),
    ("target.base_url", "localhost:30000", "target.base_url: must be a URL like http://"),
    ("target.unit", "sglang", "target.unit: must be a unit name like sglang.service"),
    ("target.ready_timeout", -5, "target.ready_timeout: must be at least 1"),
    ("search_space", "nope.yaml", "search_space: file not found"),
    ("benchmark.concurrency", [1, 0], "benchmark.concurrency: must be a list of positive"),
    ("benchmark.concurrency", [4, 4], "benchmark.concurrency: has duplicate levels"),
    ("benchmark.concurrency", "1,16", "benchmark.concurrency: must be a list of positive"),
    (
        "benchmark.workload",
        "poetry",
        "benchmark.workload: must be natural, copy, greedy, random[:N] or",
    ),
    ("benchmark.max_duration", 0.6, "benchmark.max_duration: (0.6) must be at least min_duration"),
    ("benchmark.ci_width", 2, "benchmark.ci_width: must be a fraction in (0, 1)"),
    ("objective.mode", "sum", "objective.mode: must be one of geomean, single, pareto"),
    ("benchmark.request_rate", [2, -1], "benchmark.request_rate: must be a list of positive"),
    ("benchmark.request_rate", [2, 2], "benchmark.request_rate: has duplicate rates"),
    ("benchmark.arrivals", "bursty", "benchmark.arrivals: poisson or a trace file;"),
    ("objective.mode", "goodput", "objective.mode: goodput scores the open-loop levels: set"),
    ("objective.rate", 2, "objective.rate: only applies to mode: goodput"),
    ("objective.mode", "single", "objective.level: is required with mode: single"),
    (
        "objective.constraints.min_running_requests",
        -1,
        "objective.constraints.min_running_requests: must be at least 1",
    ),
    ("objective.constraints.max_tpot", 5, "objective.constraints.max_tpot: unknown key"),
    (
        "objective.constraints.max_degenerate_share",
        2,
        "objective.constraints.max_degenerate_share: must be a share between 0 and 1",
    ),
    ("study.on_finish", "sometimes", "study.on_finish: must be one of apply-best, restore"),
    ("target", ["a"], "target: must be a mapping, got list"),
    ("study.storage", "mysql://db/x", "study.storage: must be a URL like sqlite:///autotune.db or"),
    ("study.heartbeat_grace", 1, "study.heartbeat_grace: must be at least 5"),
    ("study.prune", "yes", "study.prune: must be true or false, got str 'yes'"),
    ("study.predict_capacity", 1, "study.predict_capacity: must be true or false, got int 1"),
    ("study.storage", "sqlite://autotune.db", "study.storage: 'sqlite://autotune.db' is not a"),
    ("workers", [], "workers: must be a non-empty list of target overrides"),
    ("workers", ["gpu1"], "workers[0]: must be a mapping of target keys, got str"),
    ("workers", [{"colour": "red"}], "workers[0].colour: unknown key"),
    ("workers", [{"name": "a b"}], "workers[0].name: must be a short name, got 'a b'"),
    (
        "workers",
        [{"name": "a"}, {"name": "b"}],
        "workers: a and b drive the same server (http://127.0.0.1:30000 on localhost)",
    ),
    (
        "workers",
        [{"name": "a", "base_url": "http://127.0.0.1:1"}, {"name": "a"}],
        "workers[1].name: 'a' is used twice",
    ),
]


@pytest.mark.parametrize(("key", "value", "expected"), BAD_INPUT, ids=[b[0] for b in BAD_INPUT])
def test_bad_config_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: object, expected: str
) -> None:
    path = _write(tmp_path, _set(_base(), key, value))
    code, err = _validate(path, capsys)
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert str(path) in err
    assert expected in err


# (objective section, the one error line it must give) with benchmark.request_rate [1, 4]
BAD_RATE_OBJECTIVES = [
    ({"mode": "goodput", "slo": {"ttft_ms": 500}}, "objective.rate: is required with mode"),
    (
        {"mode": "goodput", "rate": 2, "slo": {"ttft_ms": 500}},
        "objective.rate: 2 is not one of benchmark.request_rate [1.0, 4.0]",
    ),
    ({"mode": "max_rate"}, "objective.slo: mode max_rate needs a target"),
    (
        {"mode": "max_rate", "slo": {"ttft_ms": 500, "attainment": 0}},
        "objective.slo.attainment: must be a share in (0, 1], got 0",
    ),
    ({"mode": "max_rate", "slo": {"p99": 5}}, "objective.slo.p99: unknown key"),
]


@pytest.mark.parametrize(("objective", "expected"), BAD_RATE_OBJECTIVES)
def test_a_rate_objective_without_what_it_needs_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], objective: dict, expected: str
) -> None:
    data = _set(_base(), "benchmark.request_rate", [4, 1])
    data["objective"] = objective
    code, err = _validate(_write(tmp_path, data), capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert expected in err


def test_a_trace_with_a_bad_line_is_named_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "trace.txt").write_text("0.0\n0.5\nsoon\n")
    data = _set(_base(), "benchmark.arrivals", "trace.txt")
    code, err = _validate(_write(tmp_path, data), capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "benchmark.arrivals" in err and "trace.txt:3: not an arrival time" in err


def test_rate_levels_read_sorted_with_slos_from_the_constraints(tmp_path: Path) -> None:
    (tmp_path / "trace.jsonl").write_text('{"timestamp": 0}\n{"timestamp": 250}\n')
    data = _set(_base(), "benchmark.request_rate", [8, 0.5, 2])
    data["benchmark"]["arrivals"] = "trace.jsonl"
    data["objective"] = {
        "mode": "goodput",
        "rate": 2,
        "constraints": {"max_ttft_p99_ms": 800, "max_itl_p50_ms": 40},
    }
    cfg = load_config(_write(tmp_path, data))
    assert cfg.benchmark.request_rate == (0.5, 2.0, 8.0)
    assert cfg.benchmark.arrivals == str(tmp_path / "trace.jsonl")
    # Without its own SLO a request is held to the constraints' latency limits.
    assert (cfg.objective.slo.ttft_ms, cfg.objective.slo.tpot_ms) == (800, 40)
    assert cfg.summary()["objective"]["rate"] == 2


def test_single_level_must_be_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _set(_set(_base(), "objective.mode", "single"), "objective.level", 64)
    code, err = _validate(_write(tmp_path, data), capsys)
    assert code == 2
    assert "objective.level: 64 is not one of benchmark.concurrency [1, 16]" in err


def test_yaml_syntax_error_names_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "study:\n  name: [unclosed\ntarget: {}\n")
    code, err = _validate(path, capsys)
    assert code == 2
    assert f"{path}: not valid YAML" in err
    assert "line" in err


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _validate(tmp_path / "nope.yaml", capsys)
    assert code == 2
    assert err.endswith("nope.yaml: config file not found")


def test_missing_search_space_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _validate(_write(tmp_path, _set(_base(), "search_space", _DELETE)), capsys)
    assert code == 2
    assert "search_space: is required" in err


def test_bad_search_space_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "space.yaml").write_text(
        "params:\n  steps:\n    flag: --speculative-num-steps\n    low: 1\n    high: topk * 2\n"
    )
    code, err = _validate(_write(tmp_path, _set(_base(), "search_space", "space.yaml")), capsys)
    assert code == 2
    assert "space.yaml: params.steps.high: unknown name 'topk'" in err


def test_inline_search_space(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inline = {
        "params": {
            "speculative_num_steps": {"flag": "--speculative-num-steps", "low": 1, "high": 4}
        }
    }
    code = cli.main(
        ["validate", "--config", str(_write(tmp_path, _set(_base(), "search_space", inline)))]
    )
    assert code == 0, capsys.readouterr().err


def test_unit_without_exec_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _base(), unit="[Unit]\nDescription=x\n[Service]\nType=simple\n")
    code, err = _validate(path, capsys)
    assert code == 2
    # One problem, one line, naming its file.
    assert err.splitlines() == [
        f"autotune: error: unit: {tmp_path / 'sim.service'}: ExecStart: no ExecStart= in [Service]"
    ]


def test_a_unit_that_is_not_an_ini_file_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _base(), unit="#!/bin/sh\nexec python -m sglang.launch_server\n")
    code, err = _validate(path, capsys)
    assert code == 2
    assert err.splitlines() == [
        f"autotune: error: unit: {tmp_path / 'sim.service'}: [Service]: "
        "the unit has no [Service] section"
    ]


def test_a_local_unit_file_may_be_above_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    units = tmp_path / "units"
    units.mkdir()
    (units / "sglang.service").write_text(UNIT)
    study = tmp_path / "study"
    study.mkdir()
    path = study / "autotune.yaml"
    path.write_text(yaml.safe_dump(_set(_base(), "target.unit_file", "../units/sglang.service")))
    code, err = _validate(path, capsys)
    assert code == 0, err
    assert load_config(path).target.unit_file == units / "sglang.service"


@pytest.mark.parametrize("where", ["config", "space"])
def test_a_key_given_twice_is_refused_with_both_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    if where == "config":
        text = yaml.safe_dump(_base(), sort_keys=False) + "benchmark:\n  concurrency: [64]\n"
        path = _write(tmp_path, text)
        first = text.splitlines().index("benchmark:") + 1
        file, key = path, "benchmark"
    else:
        space = (REPO / "search_spaces" / "sglang-mtp.yaml").read_text()
        file = tmp_path / "space.yaml"
        file.write_text(space + "memory_grows_with: [speculative_eagle_topk]\n")
        first = space.splitlines().index("memory_grows_with: [speculative_num_steps]") + 1
        path = _write(tmp_path, _set(_base(), "search_space", str(file)))
        key = "memory_grows_with"
    lines = file.read_text().splitlines()
    last = max(i for i, line in enumerate(lines, 1) if line.startswith(f"{key}:"))
    code, err = _validate(path, capsys)
    assert code == 2
    assert err.splitlines() == [
        f"autotune: error: {file}: {key}: appears twice (lines {first} and {last}): "
        "YAML would keep only the second; remove one"
    ]


def test_cli_process_prints_no_traceback(tmp_path: Path) -> None:
    """The installed command, as a user runs it: one line on stderr, exit 2."""
    path = _write(tmp_path, _set(_base(), "benchmark.concurrency", [0]))
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", "validate", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"autotune: error: {path}: benchmark.concurrency: "
        "must be a list of positive whole numbers, got [0]"
    ]


def test_remote_example_config_loads() -> None:
    cfg = load_config(REPO / "examples" / "sglang-remote.yaml")
    assert cfg.target.deploy == "ssh"
    assert cfg.target.ssh["host"] == "gpu1"
    assert cfg.benchmark.finalists == 3


def test_daemon_service_example_is_a_valid_unit() -> None:
    from autotune.unit.verify import verify_unit

    text = (REPO / "examples" / "autotune.service").read_text()
    assert verify_unit(text, "autotune.service", check_executables=False) == []


def test_gp_sampler_refuses_a_pareto_objective(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _set(_set(_base(), "study.sampler", "gp"), "objective.mode", "pareto")
    path = _write(tmp_path, data)
    code, err = _validate(path, capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{path}: study.sampler: gp models one objective" in err


def test_auto_sampler_is_the_gp_for_one_objective_and_tpe_for_a_front(tmp_path: Path) -> None:
    single = load_config(_write(tmp_path, _base()))
    assert isinstance(make_sampler(single), gp.EnumeratedGPSampler)
    front = load_config(_write(tmp_path, _set(_base(), "objective.mode", "pareto")))
    assert isinstance(make_sampler(front), optuna.samplers.TPESampler)


def test_gp_sampler_refuses_a_space_it_cannot_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    space = yaml.safe_load(
        (Path(__file__).parent.parent / "search_spaces" / "sglang-mtp.yaml").read_text()
    )
    space["params"]["mem_fraction_static"] = {
        "flag": "--mem-fraction-static",
        "type": "float",
        "low": 0.8,
        "high": 0.9,
    }
    (tmp_path / "floats.yaml").write_text(yaml.safe_dump(space))
    data = _set(_set(_base(), "study.sampler", "gp"), "search_space", "floats.yaml")
    path = _write(tmp_path, data)
    code, err = _validate(path, capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{path}: study.sampler: gp scores every config of the space" in err


def test_on_finish_defaults_to_stop_for_a_local_process_and_apply_best_elsewhere(
    tmp_path: Path,
) -> None:
    from autotune.config import load_config

    cfg = load_config(REPO / "examples" / "demo.yaml")
    assert cfg.study.on_finish == "stop"
    cfg = load_config(REPO / "examples" / "llamacpp-local.yaml")
    assert cfg.study.on_finish == "apply-best"
    assert cfg.objective.constraints.max_degenerate_share is None
    assert cfg.target.engine == "llama.cpp" and cfg.space.engine == "llama.cpp"


def test_stop_at_the_end_is_refused_for_a_gpu_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _set(_base(), "study.on_finish", "stop")
    _set(data, "target.deploy", "ssh")
    _set(data, "target.ssh", {"host": "gpu1"})
    _set(data, "target.unit_file", "/etc/systemd/system/sglang.service")
    code, err = _validate(_write(tmp_path, data), capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "study.on_finish: stop applies to deploy: local-process only" in err


def test_workers_lay_their_keys_over_the_target(tmp_path: Path) -> None:
    data = _base()
    data["target"]["ready_timeout"] = 60
    data["workers"] = [
        {"name": "one", "base_url": "http://127.0.0.1:30001"},
        {"name": "two", "base_url": "http://127.0.0.1:30002", "ready_timeout": 5},
    ]
    cfg = load_config(_write(tmp_path, data))
    assert [w.name for w in cfg.workers] == ["one", "two"]
    two = cfg.for_worker("two")
    assert two.worker == "two" and two.target.base_url == "http://127.0.0.1:30002"
    assert two.target.ready_timeout == 5 and cfg.for_worker("one").target.ready_timeout == 60


def test_several_ssh_hosts_on_one_sqlite_file_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _base()
    data["target"] = {"deploy": "ssh", "unit": "sglang.service"}
    data["workers"] = [{"ssh": {"host": "gpu1"}}, {"ssh": {"host": "gpu2"}}]
    code, err = _validate(_write(tmp_path, data), capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "study.storage: workers on several hosts need a database they all reach" in err


def test_an_unknown_worker_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _base()
    data["workers"] = [{"name": "one"}]
    code = cli.main(["validate", "--config", str(_write(tmp_path, data)), "--worker", "nine"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "workers: no worker named 'nine' (workers: one)" in err


def test_a_password_in_the_storage_url_is_never_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _set(_base(), "study.storage", "oracle://tuner:hunter2@db/x")
    code, err = _validate(_write(tmp_path, data), capsys)
    assert code == 2 and "hunter2" not in err and "***" in err, err
    cfg = load_config(_write(tmp_path, _set(_base(), "study.storage", "sqlite:///t.db")))
    pg = dataclasses.replace(
        cfg, study=dataclasses.replace(cfg.study, storage="postgresql://tuner:hunter2@db/x")
    )
    assert "hunter2" not in json.dumps(pg.summary())


def test_several_hosts_example_loads() -> None:
    cfg = load_config(REPO / "examples" / "several-hosts.yaml")
    assert [w.name for w in cfg.workers] == ["gpu1", "gpu2", "gpu3"]
    gpu2 = cfg.for_worker("gpu2").target
    assert gpu2.ssh == {"user": "tuner", "key_file": "~/.ssh/autotune_ed25519", "host": "gpu2"}
    assert "${TUNER_DB_PASSWORD}" in cfg.study.storage  # taken from the environment when opened


def test_errors_are_json_lines_when_logs_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under systemd (--log-format json) the one error line is a JSON line for journald."""
    path = _write(tmp_path, _set(_base(), "study.n_trials", 0))
    code = cli.main(["--log-format", "json", "validate", "--config", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    line = json.loads(err[0])
    assert line["level"] == "error" and line["exit_code"] == 2
    assert "study.n_trials: must be at least 1, got 0" in line["event"]


def test_init_answers_bad_arguments_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unit = REPO / "examples" / "sglang-sim.service"
    (tmp_path / "afile").write_text("")
    cases = [
        (["init", "--ssh", "a@b@c", "--unit", "x.service"], "--ssh must look like user@host"),
        (["init", "--local"], "--unit is required with --ssh and --local"),
        (["init", "--unit-file", str(tmp_path / "none.service")], "cannot read"),
        (
            ["init", "--unit-file", str(unit), "--out", str(tmp_path / "afile")],
            "cannot write into --out",
        ),
    ]
    for argv, expected in cases:
        code = cli.main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 1 and len(err) == 1 and expected in err[0], (argv, err)


def test_redact_never_shows_a_password_even_in_a_url_it_cannot_parse() -> None:
    from autotune.store.storage import redact

    assert (
        redact("postgresql+psycopg://tuner:hunter2@db/x") == "postgresql+psycopg://tuner:***@db/x"
    )
    assert "hunter2" not in redact("not a url://tuner:hunter2@")
    assert redact("sqlite:///autotune.db") == "sqlite:///autotune.db"
