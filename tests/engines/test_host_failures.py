"""A broken host is not a config's failure: each case through the real CLI, then fixed.

Every case ends with one line naming the cause, a non-zero exit, no trial recorded
infeasible for it, and the config's true result once the cause is fixed. The messages the
classifier reads are produced here by the real programs (Python, a shell), not written out.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autotune.engines import get_engine
from autotune.engines.host import host_failure
from tests.helpers.e2e import REPO, autotune, status, stop_process, study_dir, wait_http


def _quick(config: Path, n_trials: int = 1) -> None:
    data = yaml.safe_load(config.read_text())
    data["study"]["n_trials"] = n_trials
    data["benchmark"]["concurrency"] = [1]
    data["target"]["ready_timeout"] = 30
    config.write_text(yaml.safe_dump(data, sort_keys=False))


def _infeasible(config: Path) -> list[dict]:
    return [t for t in status(config)["trials"] if t["feasible"] is False]


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stderr.strip().splitlines()[-1]


def _port(config: Path) -> int:
    return int(yaml.safe_load(config.read_text())["target"]["base_url"].rsplit(":", 1)[1])


# ------------------------------------------------------------------ the real CLI
def test_a_server_autotune_did_not_start_holds_the_port(tmp_path: Path) -> None:
    config = study_dir(tmp_path)
    _quick(config)
    port = _port(config)
    other = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/", other)
        proc = autotune("start", "--config", str(config), cwd=tmp_path, timeout=120)
        assert proc.returncode == 3, proc.stderr[-3000:]
        line = _last_line(proc)
        assert f"port {port} is held by pid {other.pid} (" in line and "http.server" in line
        assert "[port_in_use]" in line and "Traceback" not in proc.stderr
        assert "server ready" not in proc.stderr  # the other server was never measured
        assert _infeasible(config) == []
        (trial,) = [t for t in status(config)["trials"] if t["state"] != "WAITING"]
        assert trial["state"] == "FAIL" and trial["failure"] == "host_failure"  # given back
    finally:
        stop_process(other)
    # The port freed, the same command measures the unit itself.
    again = autotune("start", "--config", str(config), cwd=tmp_path, timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    done = [t for t in status(config)["trials"] if t["state"] == "COMPLETE"]
    assert len(done) == 1 and done[0]["baseline"] and done[0]["feasible"] is True
    assert done[0]["value"] > 0


def test_a_unit_whose_module_is_missing_stops_the_study_before_a_deployment(
    tmp_path: Path,
) -> None:
    config = study_dir(tmp_path)
    _quick(config)
    unit = tmp_path / "sim.service"
    working = unit.read_text()
    unit.write_text(working.replace("-m autotune.sim", "-m autotune_not_installed.launch_server"))
    # Said by the program itself, asked for its --help before anything is deployed.
    checked = autotune("validate", "--config", str(config), cwd=tmp_path, timeout=120)
    assert checked.returncode != 0, checked.stdout + checked.stderr
    assert "No module named 'autotune_not_installed'" in checked.stdout + checked.stderr
    proc = autotune("start", "--config", str(config), cwd=tmp_path, timeout=120)
    assert proc.returncode == 3, proc.stderr[-3000:]
    line = _last_line(proc)
    assert "No module named 'autotune_not_installed'" in line and "[module_missing]" in line
    assert "install it in the Python environment" in line
    assert "-m autotune_not_installed.launch_server --help" in line
    assert "deploying" not in proc.stderr and "Traceback" not in proc.stderr
    assert _infeasible(config) == []
    unit.write_text(working)  # fixed: the study resumes and measures the unit as it is
    again = autotune("start", "--config", str(config), cwd=tmp_path, timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    done = [t for t in status(config)["trials"] if t["state"] == "COMPLETE"]
    assert len(done) == 1 and done[0]["feasible"] is True and done[0]["value"] > 0


def test_a_space_flag_the_installed_server_lacks_is_refused_before_a_deployment(
    tmp_path: Path,
) -> None:
    """The simulator's --help, like SGLang's, names every flag it has; a typo in the space
    is found by asking it, not after a model load."""
    space = yaml.safe_load((REPO / "search_spaces" / "sglang-mtp.yaml").read_text())
    space["params"]["speculative_num_steps"]["flag"] = "--speculative-num-stepz"
    config = study_dir(tmp_path, space=space, flags="--speculative-eagle-topk 1")
    _quick(config)
    for verb in ("validate", "start"):
        proc = autotune(verb, "--config", str(config), cwd=tmp_path, timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
        said = proc.stdout + proc.stderr
        assert "params.speculative_num_steps.flag" in said, said
        assert "--speculative-num-stepz: this SGLang does not have it" in said, said
        assert "Traceback" not in said and "deploying" not in said
    assert status(config)["trials"] == []


def test_a_unit_whose_program_does_not_exist_is_refused_before_a_trial(tmp_path: Path) -> None:
    config = study_dir(tmp_path)
    _quick(config)
    unit = tmp_path / "sim.service"
    working = unit.read_text()
    unit.write_text(working.replace(sys.executable, "/opt/no-such-python/bin/python3"))
    # A local unit's program is looked for before anything is deployed: the lines
    # docs/overnight.md's fault table quotes (validate asks systemd-analyze as well).
    proc = autotune("validate", "--config", str(config), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr[-3000:]
    assert (
        f"{unit}: systemd-analyze verify: sim.service: Command /opt/no-such-python/bin/python3 "
        "is not executable: No such file or directory"
    ) in proc.stdout + proc.stderr
    proc = autotune("start", "--config", str(config), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _last_line(proc) == (
        "autotune: error: sim.service: ExecStart: /opt/no-such-python/bin/python3 is not an "
        "executable file"
    ), _last_line(proc)
    assert "deploying" not in proc.stderr and "Traceback" not in proc.stderr
    assert status(config)["trials"] == []
    unit.write_text(working)  # installed: the study starts and measures the unit as it is
    again = autotune("start", "--config", str(config), cwd=tmp_path, timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    done = [t for t in status(config)["trials"] if t["state"] == "COMPLETE"]
    assert len(done) == 1 and done[0]["feasible"] is True and done[0]["value"] > 0


def test_an_empty_folder_is_not_the_demo(tmp_path: Path) -> None:
    for verb in ("start", "validate", "status"):
        proc = autotune(verb, cwd=tmp_path, timeout=60)
        assert proc.returncode == 2, (verb, proc.stderr[-2000:])
        line = _last_line(proc)
        assert f"no autotune.yaml in {tmp_path}" in line and "--demo" in line, line
    assert list(tmp_path.iterdir()) == []  # no study, no server, no files


@pytest.mark.slow  # an end-to-end run: not in make test-fast
def test_a_forgotten_trial_is_measured_again_on_resume(tmp_path: Path) -> None:
    config = study_dir(tmp_path)
    _quick(config, n_trials=2)
    first = autotune("start", "--config", str(config), cwd=tmp_path, timeout=240)
    assert first.returncode == 0, first.stderr[-3000:]
    before = {t["number"]: t for t in status(config)["trials"]}
    assert [t["state"] for t in before.values()] == ["COMPLETE", "COMPLETE"]

    forgot = autotune("forget", "1", "--config", str(config), cwd=tmp_path)
    assert forgot.returncode == 0, forgot.stderr
    assert "forgotten: trial 1" in forgot.stdout
    shown = autotune("status", "--config", str(config), cwd=tmp_path)
    row = next(x for x in shown.stdout.splitlines() if x.strip().startswith("1 "))
    assert "FORGOTTEN" in row and "forgotten: was COMPLETE" in row, shown.stdout
    # Its value and interval are gone with it: the columns between state and config empty.
    assert "%" not in row.split("FORGOTTEN", 1)[1].split("[", 1)[0], row
    header = next(x for x in shown.stdout.splitlines() if x.strip().startswith("#"))
    assert header.split()[:5] == ["#", "state", "feasible", "tok/s", "±95%"], header
    after = status(config)
    assert after["trials"][1]["value"] is None and after["trials"][1]["forgotten"]["values"]

    again = autotune("start", "--config", str(config), cwd=tmp_path, timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    trials = status(config)["trials"]
    done = [t for t in trials if t["state"] == "COMPLETE"]
    assert len(done) == 2  # the budget counts the forgotten one no more
    rerun = next(t for t in trials if t["number"] > 1 and t["state"] == "COMPLETE")
    assert rerun["config"] == before[1]["config"]  # its config, measured anew
    assert rerun["value"] > 0

    none = autotune("forget", "--kind", "crash_on_start", "--config", str(config), cwd=tmp_path)
    assert none.returncode == 0 and "nothing to forget" in none.stdout
    twice = autotune("forget", "1", "--config", str(config), cwd=tmp_path)
    assert twice.returncode == 1 and "trial 1 is forgotten already" in twice.stderr
    bad = autotune("forget", "99", "--config", str(config), cwd=tmp_path)
    assert bad.returncode == 1 and "no trial 99" in bad.stderr and "Traceback" not in bad.stderr


# ------------------------------------------------------------------ the messages themselves
@pytest.mark.parametrize(
    ("argv", "kind", "words"),
    [
        ([sys.executable, "-m", "not_installed_pkg.launch_server"], "module_missing",
         "No module named 'not_installed_pkg' (python -m not_installed_pkg.launch_server)"),
        ([sys.executable, "-m", "not_installed_pkg"], "module_missing", "not_installed_pkg"),
        ([sys.executable, "-c", "import not_installed_dep"], "module_missing",
         "No module named 'not_installed_dep'"),
        (["/bin/sh", "-c", "exec /opt/no-such/server --port 1"], "program_missing",
         "/opt/no-such/server"),
        (["/usr/bin/env", "no-such-server-program"], "program_missing", "no-such-server-program"),
        ([sys.executable, "-c", "open('/proc/1/mem', 'w')"], "permission_denied", "/proc/1/mem"),
        ([sys.executable, "-c", "import errno, os; raise OSError(errno.ENOSPC, "
          "os.strerror(errno.ENOSPC))"], "disk_full", "No space left on device"),
    ],
)  # fmt: skip
def test_what_the_runtime_prints_is_named_the_hosts_failure(
    argv: list[str], kind: str, words: str, tmp_path: Path
) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=30)
    text = done.stdout + done.stderr
    assert done.returncode != 0, text
    found = host_failure(text.splitlines(), done.returncode)
    assert found is not None and found.kind == kind, (text, found)
    assert words in found.reason
    for engine in ("sglang", "vllm", "llama.cpp"):
        assert get_engine(engine).classify_failure(text, done.returncode).kind == kind


def test_a_warning_that_mentions_a_module_is_not_the_cause() -> None:
    # vLLM's CPU build warns so at every start and runs on: the config's failure stays its own.
    log = (
        "WARNING 12-03 10:00:00 [_custom_ops.py:20] Failed to import from vllm._C with "
        "ModuleNotFoundError(\"No module named 'vllm._C'\")\n"
    )
    assert host_failure(log.splitlines(), 1) is None
