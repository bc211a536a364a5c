"""Run commands on a host: the one primitive every systemd deployer is built from.

A `Runner` takes an argv (never a shell string), so nothing a user typed can
become shell syntax. `LocalRunner` uses subprocess; `autotune.deploy.ssh.SSHRunner`
runs the same argv on a remote host. Transport failures raise `DeployError`;
a command that runs and fails is a normal `Result` with a non-zero exit code.
"""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from autotune.errors import DeployError


@dataclass(frozen=True)
class Result:
    """What one command did."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def out(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")


class Process(Protocol):
    """A long-running command whose life is tied to its stdin (used for the host lock)."""

    def readline(self, timeout: float) -> str:
        """Next line of stdout ('' once the process has ended)."""

    def alive(self) -> bool:
        """True while the process runs and the link to it is up."""

    def error_output(self) -> str:
        """What the process wrote to stderr, once it has ended ('' while it runs)."""

    def close(self) -> None:
        """Close stdin (the process sees EOF and ends) and forget it."""


class Runner(Protocol):
    """Runs argv lists on one host."""

    #: For messages: "local", "ssh bob@gpu1:22".
    description: str

    def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        """Run `argv` to completion. Raises DeployError if the transport fails or it times out."""

    def start(self, argv: Sequence[str]) -> Process:
        """Start `argv` and keep it running until `Process.close()` or the link drops."""

    def close(self) -> None:
        """Release the connection, if any."""


def command_line(argv: Sequence[str]) -> str:
    """The POSIX-shell command line that runs exactly `argv` (every word quoted)."""
    if not argv:
        raise ValueError("empty argv")
    return " ".join(shlex.quote(str(arg)) for arg in argv)


def brief(argv: Sequence[str]) -> str:
    """A short form of `argv` for error messages: no stdin, no inline scripts."""
    words = list(argv)
    # Inline sh scripts are long and say nothing to a user; their name does.
    if len(words) >= 3 and words[1] == "-c" and words[0].endswith("sh"):
        words = [words[0], "-c", "<script>", *words[3:]]
    return command_line(words)


class _LocalProcess:
    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen

    def readline(self, timeout: float) -> str:
        stdout = self._popen.stdout
        assert stdout is not None
        line: list[bytes] = []
        # readline() on a pipe has no timeout; a helper thread gives it one.
        reader = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive():
            raise DeployError(f"no answer from {brief(self._popen.args)} within {timeout:.0f} s")  # type: ignore[arg-type]
        return line[0].decode("utf-8", errors="replace") if line else ""

    def alive(self) -> bool:
        return self._popen.poll() is None

    def error_output(self) -> str:
        if self._popen.poll() is None or self._popen.stderr is None:
            return ""
        return self._popen.stderr.read().decode("utf-8", errors="replace")

    def close(self) -> None:
        if self._popen.stdin is not None and not self._popen.stdin.closed:
            with contextlib.suppress(OSError):
                self._popen.stdin.close()
        try:
            self._popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._popen.kill()
            self._popen.wait()
        for stream in (self._popen.stdout, self._popen.stderr):
            if stream is not None:
                stream.close()


class LocalRunner:
    """Runs commands on this machine with subprocess (no shell)."""

    description = "local"

    def __init__(self, command_timeout_s: float = 60.0) -> None:
        self.command_timeout_s = command_timeout_s

    def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        limit = self.command_timeout_s if timeout is None else timeout
        try:
            done = subprocess.run(
                list(argv),
                input=stdin if stdin is not None else b"",
                capture_output=True,
                timeout=limit,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise DeployError(f"{brief(argv)} timed out after {limit:.0f} s") from exc
        except OSError as exc:
            raise DeployError(f"cannot run {brief(argv)}: {exc.strerror or exc}") from exc
        return Result(tuple(argv), done.returncode, done.stdout, done.stderr)

    def start(self, argv: Sequence[str]) -> Process:
        try:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            raise DeployError(f"cannot run {brief(argv)}: {exc.strerror or exc}") from exc
        return _LocalProcess(popen)

    def close(self) -> None:
        return None
