"""Run `autotune start` as a real background process and watch its log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


class Daemon:
    """`autotune start` in a subprocess; its stderr is collected line by line."""

    def __init__(self, *args: str, cwd: Path, prefix: tuple[str, ...] = ()) -> None:
        env = {**os.environ, "AUTOTUNE_LOG_FORMAT": "console"}
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "autotune", "start", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def wait_for(self, *needles: str, timeout: float = 120) -> None:
        """Until the needles have appeared in this order in the log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pos = 0
            text = self.log
            for needle in needles:
                pos = text.find(needle, pos)
                if pos < 0:
                    break
                pos += len(needle)
            else:
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"daemon exited ({self.proc.returncode}):\n{self.log[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {needles}:\n{self.log[-3000:]}")

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 180) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(5)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
