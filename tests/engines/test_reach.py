"""Flags that never reach the server: refused before deploying when the unit shows it, caught
after the deploy (the server reports something else) otherwise; never a silently reused trial."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest
import yaml

from autotune.engines.sglang import SGLangEngine
from autotune.unit import reach
from autotune.unit.unitfile import parse_exec_start
from tests.helpers.e2e import autotune, status, study_dir

TUNED = ["--speculative-num-steps", "--speculative-eagle-topk", "--speculative-algorithm"]


def _argv(exec_start: str) -> list[str]:
    return parse_exec_start(f"[Service]\nExecStart={exec_start}\n").argv


@pytest.mark.parametrize(
    "exec_start",
    [
        "/bin/bash -c 'exec python -m sglang.launch_server --speculative-num-steps 3'",
        "/usr/bin/env bash -lc 'python -m sglang.launch_server $ARGS'",
        '/usr/bin/env -i HOME=/root sh -ec "exec python -m sglang.launch_server"',
        "/bin/busybox sh -c 'python -m sglang.launch_server'",
        "-/bin/dash -c 'python -m sglang.launch_server'",
        "/bin/bash --login -c 'python -m sglang.launch_server'",
    ],
)
def test_a_shell_running_a_command_string_is_found(exec_start: str) -> None:
    problem = reach.hidden_flags(_argv(exec_start), TUNED)
    assert problem is not None and " -c '…'" in problem
    if "--speculative-num-steps 3" in exec_start:
        assert "it holds --speculative-num-steps" in problem


def test_a_flag_inside_one_quoted_word_is_found() -> None:
    argv = _argv('python -m sglang.launch_server "--speculative-eagle-topk 2 --port 30000"')
    problem = reach.hidden_flags(argv, TUNED)
    assert problem is not None and "--speculative-eagle-topk inside the quoted word" in problem


@pytest.mark.parametrize(
    "exec_start",
    [
        "python -m sglang.launch_server --speculative-num-steps 3 --served-model-name 'my model'",
        "/bin/bash /opt/run-sglang.sh --speculative-num-steps 3",  # a script: args reach it
        "/usr/bin/env python -m sglang.launch_server --speculative-algorithm EAGLE",
    ],
)
def test_a_plain_command_line_passes(exec_start: str) -> None:
    assert reach.hidden_flags(_argv(exec_start), TUNED) is None


def test_values_are_compared_as_the_server_means_them() -> None:
    flags = {"speculative_num_steps": "--speculative-num-steps", "x": "--x"}
    asked = {"speculative_num_steps": 5, "x": "EAGLE", "not_reported": 1}
    assert reach.unreached(asked, {"speculative_num_steps": 5.0, "x": "eagle"}, flags) == []
    missed = reach.unreached(asked, {"speculative_num_steps": 3, "x": "EAGLE"}, flags)
    assert [(m.flag, m.asked, m.running) for m in missed] == [("--speculative-num-steps", 5, 3)]
    assert "--speculative-num-steps asked 5, the server runs 3" in missed[0].line()
    assert reach.same(True, "true") and not reach.same(1, None) and not reach.same("a", "b")


def test_sglang_draft_adjustment_is_not_a_miss() -> None:
    # SGLang sets num_draft_tokens = steps + 1 when topk is 1: documented, not a lost flag.
    asked = {"speculative_num_steps": 4, "speculative_eagle_topk": 1,
             "speculative_num_draft_tokens": 8}  # fmt: skip
    assert SGLangEngine().runs(asked)["speculative_num_draft_tokens"] == 5
    asked["speculative_eagle_topk"] = 2
    assert SGLangEngine().runs(asked)["speculative_num_draft_tokens"] == 8


def _wrapped_unit(tmp: Path, config: Path, exec_start: str) -> None:
    unit = tmp / "sim.service"
    text = unit.read_text()
    start = text.index("ExecStart=")
    end = text.index("Restart=")
    unit.write_text(text[:start] + f"ExecStart={exec_start}\n" + text[end:])


def _sim_command(port: int) -> str:
    return (
        f"{sys.executable} -m autotune.sim --model-path Qwen/Qwen3.5-122B-A10B "
        f"--host 127.0.0.1 --port {port} --speculative-algorithm EAGLE "
        "--speculative-num-steps 3 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 4 --sim-load-time 0.2"
    )


def _port(config: Path) -> int:
    return int(yaml.safe_load(config.read_text())["target"]["base_url"].rsplit(":", 1)[1])


def test_validate_and_start_refuse_a_shell_wrapped_unit(tmp_path: Path) -> None:
    config = study_dir(tmp_path)
    command = _sim_command(_port(config))
    _wrapped_unit(tmp_path, config, f"/bin/sh -c {shlex.quote('exec ' + command)}")
    for verb in ("validate", "start"):
        proc = autotune(verb, "--config", str(config), cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "sim.service: ExecStart: runs sh -c '…' (it holds" in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
    assert "deploying" not in proc.stderr  # nothing was started


@pytest.mark.slow
def test_a_wrapper_script_that_drops_the_flags_stops_the_study(tmp_path: Path) -> None:
    # The operator's script hard-codes the knobs and ignores its arguments: every trial would
    # measure (3, 1, 4) again. The first trial asking for something else stops the study.
    config = study_dir(tmp_path, n_trials=6, sampler="random")
    script = tmp_path / "run-sim.sh"
    script.write_text(f'#!/bin/sh\n# ignores "$@"\nexec {_sim_command(_port(config))}\n')
    script.chmod(0o755)
    _wrapped_unit(
        tmp_path,
        config,
        f"{script} --speculative-algorithm EAGLE --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
    )
    assert autotune("validate", "--config", str(config), cwd=tmp_path).returncode == 0
    proc = autotune("start", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("autotune: error: ") and "sim.service: ExecStart: " in last, last
    assert "the server runs 3" in last and "did not reach the server" in last, last
    assert "--speculative-num-steps asked" in last, last
    assert "result reused" not in proc.stderr
    trials = status(config)["trials"]
    assert all(t["reused_from"] is None for t in trials)
    # Only configs the server really ran were recorded as measured.
    for t in trials:
        if t["state"] in ("COMPLETE", "PRUNED"):
            assert t["config"]["speculative_num_steps"] == 3, t


def test_an_environment_file_setting_a_tuned_variable_is_refused(tmp_path: Path) -> None:
    space = {
        "engine": "sglang",
        "params": {
            "skip_decode_lock": {"env": "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK", "type": "bool"},
            "speculative_num_steps": {"flag": "--speculative-num-steps", "choices": [2, 3]},
        },
    }
    config = study_dir(tmp_path, space=space)
    env_file = tmp_path / "sglang.env"
    env_file.write_text("# site settings\nSGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=0\n")
    unit = tmp_path / "sim.service"
    unit.write_text(
        unit.read_text().replace("[Service]\n", f"[Service]\nEnvironmentFile={env_file}\n")
    )
    proc = autotune("validate", "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 2
    assert (
        f"sim.service: EnvironmentFile: {env_file} sets SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK, "
        "which overrides" in proc.stdout + proc.stderr
    )
