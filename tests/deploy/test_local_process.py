"""LocalProcessDeployer against real child processes (and a real HTTP server on loopback)."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from autotune.deploy.base import Deployer
from autotune.deploy.local_process import LocalProcessDeployer, program_words
from autotune.errors import ConfigError
from autotune.testservers.ports import free_port
from autotune.unit.unitfile import patch_unit, quote_word
from tests.deploy.conftest import let_go

PY = quote_word(sys.executable)


def unit(script: str, *, service: str = "", unit_section: str = "") -> str:
    """A unit whose command runs `script` with this interpreter, unbuffered."""
    head = f"[Unit]\n{unit_section}\n" if unit_section else ""
    return f"{head}[Service]\n{service}ExecStart={PY} -u -c {quote_word(script)}\n"


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[..., LocalProcessDeployer]]:
    """Builds deployers over a unit file in tmp_path; kills what they started, whatever happens."""
    made: list[LocalProcessDeployer] = []

    def factory(text: str, **kwargs: object) -> LocalProcessDeployer:
        path = tmp_path / "server.service"
        path.write_text(text)
        kwargs.setdefault("log_dir", tmp_path / "logs")
        d = LocalProcessDeployer(path, **kwargs)  # type: ignore[arg-type]
        made.append(d)
        return d

    yield factory
    for d in made:
        let_go(d)


def test_is_a_deployer(make: Callable[..., LocalProcessDeployer]) -> None:
    d = make(unit("print(1)"))
    assert isinstance(d, Deployer)
    assert d.description == "local process (server.service)"


def test_start_log_and_restart_replaces_the_output(
    make: Callable[..., LocalProcessDeployer], tmp_path: Path
) -> None:
    first = unit("import time; print('first start'); time.sleep(60)")
    d = make(first)
    assert d.logs() == "" and d.exit_status() is None and not d.is_running()
    d.deploy(d.original_unit())
    wait_for(lambda: "first start" in d.logs())
    assert d.is_running() and d.exit_status() is None
    pid = d.pid
    assert pid is not None

    d.deploy(unit("import time; print('second start'); time.sleep(60)"))
    wait_for(lambda: "second start" in d.logs())
    assert "first start" not in d.logs()
    assert not alive(pid) and d.pid != pid
    # The user's file is never written; the working copy holds what runs.
    assert (tmp_path / "server.service").read_text() == first
    assert "second start" in (tmp_path / "logs" / "current-server.service").read_text()
    assert sorted(p.name for p in (tmp_path / "logs").glob("start-*.log")) == [
        "start-0001.log",
        "start-0002.log",
    ]


def test_restart_kills_the_whole_process_group(make: Callable[..., LocalProcessDeployer]) -> None:
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    d = make(unit(script))
    d.deploy(d.original_unit())
    wait_for(lambda: "child " in d.logs())
    child = int(d.logs().split("child ")[1].split()[0])
    parent = d.pid
    assert parent is not None and alive(child)

    d.deploy(unit("import time; time.sleep(60)"))
    assert not alive(parent) and not alive(child)


def test_orphaned_helpers_are_killed_too(make: Callable[..., LocalProcessDeployer]) -> None:
    # The main process exits at once; its helper lives on in the group, as
    # SGLang's scheduler would if the launcher died first.
    script = (
        "import subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('child', child.pid, flush=True)\n"
    )
    d = make(unit(script))
    d.deploy(d.original_unit())
    wait_for(lambda: "child " in d.logs() and not d.is_running())
    child = int(d.logs().split("child ")[1].split()[0])
    assert alive(child)
    d.stop()
    assert not alive(child)


def test_exit_status_of_a_crash(make: Callable[..., LocalProcessDeployer]) -> None:
    d = make(unit("import sys; print('Traceback: boom', flush=True); sys.exit(3)"))
    d.deploy(d.original_unit())
    wait_for(lambda: not d.is_running())
    assert d.exit_status() == 3
    assert "Traceback: boom" in d.logs()

    d.deploy(unit("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    wait_for(lambda: not d.is_running())
    assert d.exit_status() == 128 + signal.SIGKILL


def test_kill_signal_and_stop_timeout_come_from_the_unit(
    make: Callable[..., LocalProcessDeployer],
) -> None:
    graceful = (
        "import signal, sys, time\n"
        "def bye(*_):\n    print('got SIGINT', flush=True); sys.exit(0)\n"
        "signal.signal(signal.SIGINT, bye)\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    d = make(unit(graceful, service="KillSignal=SIGINT\n"))
    d.deploy(d.original_unit())
    wait_for(lambda: "up" in d.logs())
    d.stop()
    assert "got SIGINT" in d.logs() and d.exit_status() == 0

    stubborn = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    d.deploy(unit(stubborn, service="TimeoutStopSec=500ms\n"))
    wait_for(lambda: "up" in d.logs())
    started = time.monotonic()
    d.stop()
    assert time.monotonic() - started < 5
    assert d.exit_status() == 128 + signal.SIGKILL


def test_environment_and_working_directory(
    make: Callable[..., LocalProcessDeployer], tmp_path: Path
) -> None:
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    envfile = tmp_path / "server.env"
    envfile.write_text("C=from file\nB=file wins\n")
    script = (
        "import os, sys\n"
        "print('cwd', os.getcwd())\n"
        "for k in 'A B C D UNIT'.split(): print(k, '=', os.environ.get(k))\n"
        "print('path0', os.environ['PATH'].split(os.pathsep)[0])\n"
    )
    service = (
        'Environment="A=hello world" B=2\n'
        "Environment=UNIT=%n\n"
        f"EnvironmentFile={envfile}\n"
        "EnvironmentFile=-/nonexistent/optional.env\n"
        f"WorkingDirectory={workdir}\n"
    )
    d = make(unit(script, service=service), env={"PATH": "/usr/bin:/bin", "D": "base"})
    d.deploy(d.original_unit())
    wait_for(lambda: not d.is_running())
    out = d.logs()
    assert f"cwd {workdir}\n" in out
    assert "A = hello world\n" in out
    assert "B = file wins\n" in out  # EnvironmentFile= overrides Environment=
    assert "C = from file\n" in out
    assert "D = base\n" in out
    assert "UNIT = server.service\n" in out
    assert f"path0 {os.path.dirname(sys.executable)}\n" in out


def test_env_resolves_this_virtualenv_first(make: Callable[..., LocalProcessDeployer]) -> None:
    text = "[Service]\nExecStart=/usr/bin/env python -c 'import sys; print(sys.prefix)'\n"
    d = make(text, env={"PATH": "/usr/bin:/bin"})
    d.deploy(d.original_unit())
    wait_for(lambda: not d.is_running())
    assert d.logs().strip() == sys.prefix


def test_a_real_http_server_on_loopback(make: Callable[..., LocalProcessDeployer]) -> None:
    port = free_port()
    text = f"[Service]\nExecStart={PY} -m http.server --bind 127.0.0.1 {port}\n"
    d = make(text)
    d.deploy(d.original_unit())

    def answers() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(answers)
    d.stop()
    assert not d.is_running()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/", timeout=1)


def test_restore_starts_the_original_unit(make: Callable[..., LocalProcessDeployer]) -> None:
    d = make(unit("import time; print('original', flush=True); time.sleep(60)"))
    d.deploy(unit("import time; print('trial', flush=True); time.sleep(60)"))
    wait_for(lambda: "trial" in d.logs())
    d.restore()
    wait_for(lambda: "original" in d.logs())
    assert "trial" not in d.logs()


def test_a_unit_that_cannot_start_leaves_the_current_child_running(
    make: Callable[..., LocalProcessDeployer],
) -> None:
    d = make(unit("import time; time.sleep(60)"))
    d.deploy(d.original_unit())
    pid = d.pid
    with pytest.raises(ConfigError, match="is not an executable file"):
        d.deploy("[Service]\nExecStart=/nonexistent/python3 -m sglang.launch_server\n")
    with pytest.raises(ConfigError, match="WorkingDirectory: /nonexistent does not exist"):
        d.deploy(unit("print(1)", service="WorkingDirectory=/nonexistent\n"))
    with pytest.raises(ConfigError, match=r"EnvironmentFile: /nonexistent\.env does not exist"):
        d.deploy(unit("print(1)", service="EnvironmentFile=/nonexistent.env\n"))
    assert d.is_running() and d.pid == pid


def test_preflight(make: Callable[..., LocalProcessDeployer]) -> None:
    make(unit("print(1)")).preflight()
    with pytest.raises(ConfigError, match="no ExecStart="):
        make("[Service]\nType=simple\n").preflight()
    with pytest.raises(ConfigError, match="KillSignal"):
        make(unit("print(1)", service="KillSignal=SIGNOPE\n")).preflight()


def test_close_leaves_no_process_behind(make: Callable[..., LocalProcessDeployer]) -> None:
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('child', child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    d = make(unit(script), log_dir=None)
    d.deploy(d.original_unit())
    wait_for(lambda: "child " in d.logs())
    child = int(d.logs().split("child ")[1].split()[0])
    parent = d.pid
    assert parent is not None
    log_dir = d.log_dir
    d.close()
    assert not alive(parent) and not alive(child)
    assert not log_dir.exists()  # the temporary directory went with it


def test_keep_running_survives_close(make: Callable[..., LocalProcessDeployer]) -> None:
    d = make(unit("import time; print('serving', flush=True); time.sleep(60)"), log_dir=None)
    d.deploy(d.original_unit())
    wait_for(lambda: "serving" in d.logs())
    d.keep_running = True  # e.g. the study applied its best config
    d.close()
    assert d.pid is not None and alive(d.pid)
    assert d.log_dir.exists()  # the child still writes its log there
    os.killpg(d.pid, signal.SIGTERM)
    wait_for(lambda: not alive(d.pid or 0))


def test_deploy_stop_are_safe_to_repeat(make: Callable[..., LocalProcessDeployer]) -> None:
    d = make(unit("print('x')"))
    d.stop()  # nothing started yet
    d.deploy(d.original_unit())
    wait_for(lambda: not d.is_running())
    d.stop()
    d.stop()
    assert d.exit_status() == 0
    d.close()
    d.close()


EXAMPLE = Path(__file__).parents[2] / "examples" / "sglang-sim.service"


@pytest.mark.skipif(
    importlib.util.find_spec("autotune.sim.__main__") is None or not EXAMPLE.exists(),
    reason="the simulated server or its example unit is not written yet",
)
def test_the_demo_unit_runs_the_simulator_from_this_virtualenv(
    make: Callable[..., LocalProcessDeployer],
) -> None:
    port = free_port()
    text = patch_unit(
        EXAMPLE.read_text(), {"--port": str(port), "--sim-load-time": "0.2"}, source=EXAMPLE.name
    )
    # `/usr/bin/env autotune` must find this virtualenv's script, not whatever PATH says.
    d = make(text, env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    d.deploy(d.original_unit())

    def healthy() -> bool:
        assert d.is_running(), d.logs()
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(healthy, timeout=30)
    assert "The server is fired up and ready to roll!" in d.logs()
    pid = d.pid
    assert pid is not None
    started = time.monotonic()
    d.close()  # KillSignal=SIGINT from the unit
    assert time.monotonic() - started < 5
    assert not alive(pid)


@pytest.mark.parametrize(
    ("argv", "program"),
    [
        (["/usr/bin/env", "autotune", "sim", "--tp", "4"], ["/usr/bin/env", "autotune", "sim"]),
        (["/usr/bin/env", "llama-server", "-m", "x.gguf"], ["/usr/bin/env", "llama-server"]),
        (
            ["python3", "-m", "sglang.launch_server", "--model-path", "m"],
            ["python3", "-m", "sglang.launch_server"],
        ),
        (
            ["/v/bin/python3.11", "-u", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"],
            ["/v/bin/python3.11", "-u", "-m", "vllm.entrypoints.openai.api_server"],
        ),
        (
            ["/usr/bin/env", "python3", "serve.py", "--port", "1"],
            ["/usr/bin/env", "python3", "serve.py"],
        ),
        (["sglang", "serve", "--model-path", "m"], ["sglang", "serve"]),
    ],
)
def test_the_program_is_the_command_before_its_own_flags(
    argv: list[str], program: list[str]
) -> None:
    assert program_words(argv) == program


def test_the_program_is_asked_with_the_units_environment(
    make: Callable[..., LocalProcessDeployer], tmp_path: Path
) -> None:
    script = tmp_path / "server.py"
    script.write_text(
        "import os, sys\nprint(os.environ['ASKED'], os.getcwd(), *sys.argv[1:])\n"
        "sys.exit(0 if sys.argv[1:] == ['--help'] else 4)\n"
    )
    text = (
        f"[Service]\nEnvironment=ASKED=yes\nWorkingDirectory={tmp_path}\n"
        f"ExecStart={PY} -u {script} --port 1\n"
    )
    answer = make(text).program_output(["--help"])
    assert answer.exit_code == 0 and answer.command == [sys.executable, "-u", str(script)]
    assert answer.text.split() == ["yes", str(tmp_path), "--help"]
    assert make(text).program_output(["--version"]).exit_code == 4
    with pytest.raises(ConfigError, match="no-such-server is not an executable file"):
        make(f"[Service]\nExecStart={tmp_path}/no-such-server --port 1\n").program_output([])
    broken = tmp_path / "not-a-program"
    broken.write_bytes(b"\x00\x01 no interpreter line")
    broken.chmod(0o755)
    refused = make(f"[Service]\nExecStart={broken} --port 1\n").program_output(["--help"])
    assert refused.exit_code == 126 and "Exec format error" in refused.text
