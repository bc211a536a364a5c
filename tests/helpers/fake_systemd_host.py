"""A directory that plays a systemd GPU host: unit files, stand-in systemctl/journalctl/nvidia-smi.

The stand-ins are wrapper scripts in `bin/` with the state directory baked in,
so they work under `sudo` (which resets the environment) and over SSH. Point
`SystemdSettings.systemctl/journalctl` and `GpuWaitSettings.command` at them.
`cleanup()` stops every server process the stand-in started, by PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune.deploy.gpu_wait import GpuWaitSettings
from autotune.deploy.systemd import SystemdSettings

FIXTURES = Path(__file__).parent / "fixtures"
FAKE_SYSTEMD = FIXTURES / "fake_systemd.py"
FAKE_SERVER = FIXTURES / "fake_server.py"


def server_exec_start(name: str, *extra: str) -> str:
    """An ExecStart value running the stand-in server (systemd quoting = shlex quoting here)."""
    argv = [sys.executable, str(FAKE_SERVER), "--name", name, *extra]
    return " ".join(shlex.quote(a) for a in argv)


def unit_text(name: str, *extra: str, description: str = "test server") -> str:
    return (
        "[Unit]\n"
        f"Description={description}\n\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={server_exec_start(name, *extra)}\n"
        "TimeoutStopSec=10\n\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


def _is_ours(pid: int) -> bool:
    """The PID still belongs to a stand-in process (not a reused PID)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    markers = (FAKE_SYSTEMD.name.encode(), FAKE_SERVER.name.encode(), b"autotune.sim")
    return any(m in cmdline for m in markers)


class FakeSystemdHost:
    """Unit dir + state dir + stand-in commands under one world-readable temporary root."""

    def __init__(self, root: Path | None = None, unit_dir_name: str = "units") -> None:
        self.root = root or Path(tempfile.mkdtemp(prefix="autotune-fakehost-"))
        self.root.mkdir(parents=True, exist_ok=True)
        # World-readable so a non-root SSH user can reach the stand-ins.
        self.root.chmod(0o755)
        self.unit_dir = self.root / unit_dir_name
        self.state = self.root / "state"
        self.bin = self.root / "bin"
        for d in (self.unit_dir, self.state, self.bin):
            d.mkdir(parents=True, exist_ok=True)
            d.chmod(0o755)
        self.systemctl = self._wrapper("systemctl")
        self.journalctl = self._wrapper("journalctl")
        self.nvidia_smi = self._nvidia_smi()

    def _wrapper(self, tool: str) -> str:
        path = self.bin / tool
        base = [sys.executable, str(FAKE_SYSTEMD), "--state", str(self.state)]
        argv = [*base, "--unit-dir", str(self.unit_dir), tool]
        path.write_text(f'#!/bin/sh\nexec {" ".join(shlex.quote(a) for a in argv)} "$@"\n')
        path.chmod(0o755)
        return str(path)

    def _nvidia_smi(self) -> str:
        # Prints a leftover GPU process for as many calls as gpu_busy_calls says.
        path = self.bin / "nvidia-smi"
        counter = shlex.quote(str(self.state / "gpu_busy_calls"))
        path.write_text(
            "#!/bin/sh\n"
            f"n=$(cat {counter} 2>/dev/null || echo 0)\n"
            'if [ "$n" -gt 0 ]; then\n'
            f"    echo $((n - 1)) > {counter}\n"
            '    echo "4242, 39000 MiB"\n'
            "fi\n"
        )
        path.chmod(0o755)
        return str(path)

    # -- set-up -----------------------------------------------------------------

    def unit_path(self, unit: str) -> Path:
        return self.unit_dir / unit

    def write_unit(self, unit: str, text: str) -> Path:
        path = self.unit_path(unit)
        path.write_text(text)
        path.chmod(0o644)
        return path

    def systemctl_run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.systemctl, *args], capture_output=True, text=True, timeout=60, check=False
        )

    def install(self, unit: str, text: str, *, start: bool = True) -> Path:
        """Write a unit, load it and (by default) start it, as an operator would have."""
        path = self.write_unit(unit, text)
        assert self.systemctl_run("daemon-reload").returncode == 0
        if start:
            started = self.systemctl_run("start", unit)
            assert started.returncode == 0, started.stderr
        return path

    def set_gpu_busy(self, calls: int) -> None:
        (self.state / "gpu_busy_calls").write_text(f"{calls}\n")

    def gpu_wait(self, **overrides: Any) -> GpuWaitSettings:
        values: dict[str, Any] = {"command": (self.nvidia_smi,), "timeout_s": 10.0, "poll_s": 0.05}
        values.update(overrides)
        return GpuWaitSettings(**values)

    def settings(self, unit: str, **overrides: Any) -> SystemdSettings:
        values: dict[str, Any] = {
            "unit": unit,
            "unit_file": str(self.unit_path(unit)),
            "lock_file": str(self.root / "autotune.lock"),
            "systemctl": self.systemctl,
            "journalctl": self.journalctl,
            "restart_timeout_s": 30.0,
        }
        values.update(overrides)
        return SystemdSettings(**values)

    # -- inspection ---------------------------------------------------------------

    def calls(self) -> list[list[str]]:
        path = self.state / "calls.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def runtime(self, unit: str) -> dict[str, Any]:
        path = self.state / "units" / f"{unit}.json"
        return json.loads(path.read_text()) if path.exists() else {}

    # -- tear-down ----------------------------------------------------------------

    def _pids(self) -> list[tuple[int, bool]]:
        """(pid, is_process_group) of every supervisor and server the stand-in recorded."""
        out: list[tuple[int, bool]] = []
        for path in (self.state / "units").glob("*.json"):
            with contextlib.suppress(ValueError, OSError):
                data = json.loads(path.read_text())
                if data.get("MainPID"):
                    out.append((int(data["MainPID"]), True))
                if data.get("supervisor"):
                    out.append((int(data["supervisor"]), False))
        return out

    def stop_all(self) -> None:
        for pid, group in self._pids():
            if not _is_ours(pid):
                continue
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if group:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
        # Supervisors are not our children (they are detached); give them a
        # moment to be reaped by init so no zombie outlives the test.
        time.sleep(0.05)

    def cleanup(self) -> None:
        self.stop_all()
        shutil.rmtree(self.root, ignore_errors=True)
