"""Deployer `local-process`: run the unit's ExecStart as a supervised child process group.

For the demo, rehearsals and tests: no systemd needed, yet the unit file stays
the single description of how the server starts. The parts of `[Service]`
that shape the process are honoured the way systemd does: `Environment=`,
`EnvironmentFile=` (later files and lines win, files over lines),
`WorkingDirectory=`, `KillSignal=`, `TimeoutStopSec=`, the `@` prefix and
`%` specifiers / `$VARIABLES` in the command. Sandboxing, users, limits and
restart policies are not: this mode runs everything as the current user.

The child runs in its own session, so its process group holds the server and
every helper it forks (SGLang's scheduler and detokenizer processes); stopping
signals the whole group, then kills it. Helpers that start a session of
their own escape the group; systemd's cgroup would catch them, this mode
cannot.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import getpass
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from autotune.deploy import ports
from autotune.deploy.hostfiles import HostFiles
from autotune.deploy.runner import LocalRunner
from autotune.errors import ConfigError, DeployError, HostFailed
from autotune.log import get
from autotune.unit import secrets
from autotune.unit.unitfile import (
    ExecStart,
    expand_argv,
    expand_specifiers,
    parse_environment,
    parse_environment_file,
    parse_exec_start,
    service_values,
)

_log = get("autotune.deploy")

__all__ = ["LocalProcessDeployer"]

#: systemd's DefaultTimeoutStopSec.
DEFAULT_STOP_TIMEOUT = 90.0
_KILL_WAIT = 10.0  # after SIGKILL, how long a process may take to disappear
_POLL = 0.05


def leftover_server(log_dir: Path) -> int | None:
    """The process group of the server an autotune started with this state folder, if it
    still runs (the pidfile's start time tells it from a reused PID)."""
    try:
        pgid, started = (int(x) for x in (log_dir / PIDFILE).read_text().split())
    except (OSError, ValueError):
        return None
    return pgid if _start_time(pgid) == started and _group_alive(pgid) else None


class LocalProcessDeployer:
    """Runs the unit's command as a child process group of the tuner.

    The child must not outlive the tuner by accident: `close()` stops it,
    unless `keep_running` is true (given here, or set later, typically after a
    study applied its best config and the server should keep serving). A child
    kept running is no longer supervised: stop it yourself (its PID is in
    `pid`).

    `log_dir` receives the working copy of the unit (`current-<unit name>`)
    and one log per start (`start-0001.log`, ...); without it a temporary
    directory is used and removed on `close()` unless the child is kept.
    `env` replaces the tuner's own environment as the base of the child's.
    """

    def __init__(
        self,
        unit_path: Path,
        *,
        log_dir: Path | None = None,
        env: Mapping[str, str] | None = None,
        stop_timeout: float | None = None,
        keep_running: bool = False,
        companion_files: Sequence[str] = (),
        port: int | None = None,
    ) -> None:
        self.unit_path = Path(unit_path)
        self.port = port
        """The TCP port the server listens on (target.base_url's): checked free before each
        start, and held by this child once it answers."""
        self.companion_files = tuple(companion_files)
        # The same host-side scripts as over SSH, run here: one backup discipline.
        self._files = HostFiles(LocalRunner(), sudo=False)
        self.description = f"local process ({self.unit_path.name})"
        self.keep_running = keep_running
        self._own_dir = log_dir is None
        self.log_dir = (
            Path(tempfile.mkdtemp(prefix="autotune-local-")) if log_dir is None else Path(log_dir)
        )
        self._base_env = dict(os.environ if env is None else env)
        self._stop_timeout = stop_timeout
        self._original: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._starts = 0
        self._kill_signal = signal.SIGTERM
        self._unit_stop_timeout: float | None = None
        self._atexit_registered = False

    # ------------------------------------------------------------------ protocol

    def preflight(self) -> None:
        """Check the unit can be started here (file, command, directories) without starting it."""
        text = self.original_unit()
        self._prepare(text)
        try:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            probe = self.log_dir / ".autotune-write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise DeployError(f"cannot write to log directory {self.log_dir}: {exc}") from exc

    def original_unit(self) -> str:
        """The user's unit file, read once; this deployer never writes to it."""
        if self._original is None:
            try:
                self._original = self.unit_path.read_bytes().decode()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(
                    str(self.unit_path), None, f"cannot read the unit: {exc}"
                ) from exc
        return self._original

    def deploy(self, unit_text: str, files: Mapping[str, str | None] | None = None) -> None:
        """Start `unit_text`'s command with a fresh log, after stopping the current child.

        The unit is checked first: a unit that cannot start leaves the current
        child running and raises ConfigError. `files` are written (or removed) beside
        the unit once the old child is gone, each backed up once.
        """
        command = self._prepare(unit_text)
        self.stop()
        self.stop_leftover()
        for path, text in (files or {}).items():
            self._files.keep_original(path)
            if text is None:
                self._files.remove(path)
            else:
                self._files.write_atomic(path, text.encode("utf-8"))
        self._check_port_free()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # The server's key never stays in this folder (a study's): masked in the copy here,
        # and in its log once it stops or autotune leaves it running (SGLang prints it).
        secrets.remember(*secrets.in_argv(command.argv))
        self._write_working_copy(secrets.text(unit_text))
        self._starts += 1
        log_path = self.log_dir / f"start-{self._starts:04d}.log"
        with log_path.open("wb") as log:
            try:
                # The child writes straight to the file: its log survives the
                # tuner, and no pipe can fill up and block the server.
                self._proc = subprocess.Popen(
                    command.argv,
                    executable=command.executable,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=command.cwd,
                    env=command.env,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ConfigError(
                    self.unit_path.name, "ExecStart", f"cannot start {command.executable}: {exc}"
                ) from exc
        self._log_path = log_path
        self._write_pidfile(self._proc.pid)
        self._kill_signal = command.kill_signal
        self._unit_stop_timeout = command.stop_timeout
        if not self._atexit_registered:
            # Last line of defence if the tuner exits without close().
            atexit.register(self._at_exit)
            self._atexit_registered = True

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def answering(self) -> str | None:
        """Who listens on the server's port when it is not this child's process group (a
        server autotune did not start answers there); None when it is ours or cannot be
        told."""
        if self.port is None or self._proc is None:
            return None
        found = ports.holders(self.port)
        if not found:
            return None
        if any(h.pid is not None and ports.in_group(h.pid, self._proc.pid) for h in found):
            return None
        return found[0].describe()

    def _check_port_free(self) -> None:
        """Before a start: a port another process holds would have the server fail to bind
        while that process answers autotune's requests in its place."""
        if self.port is None:
            return
        found = ports.holders(self.port)
        if found:
            raise HostFailed(
                "port_in_use",
                f"port {self.port} is held by {found[0].describe()}, not by a server autotune "
                "started",
            )

    def exit_status(self) -> int | None:
        """Exit code of the ended main process; death by signal N reads 128 + N, as in a shell."""
        if self._proc is None:
            return None
        code = self._proc.poll()
        if code is None:
            return None
        return 128 - code if code < 0 else code

    def logs(self) -> str:
        """What the current (or last) start printed, stdout and stderr interleaved, its
        secrets masked."""
        if self._log_path is None:
            return ""
        try:
            return secrets.text(self._log_path.read_bytes().decode(errors="replace"))
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """Signal the whole process group with KillSignal=, wait TimeoutStopSec=, then SIGKILL."""
        proc = self._proc
        if proc is None:
            return
        pgid = proc.pid  # a session leader's group id is its pid
        timeout = self._stop_timeout
        if timeout is None:
            timeout = self._unit_stop_timeout or DEFAULT_STOP_TIMEOUT
        if _group_alive(pgid) or proc.poll() is None:
            _signal_group(pgid, self._kill_signal)
            if not _wait_group(proc, pgid, timeout):
                _signal_group(pgid, signal.SIGKILL)
                if not _wait_group(proc, pgid, _KILL_WAIT):
                    raise DeployError(f"process group {pgid} survived SIGKILL")
        proc.wait()  # reap the main process so its exit status stays readable
        self._scrub_log()

    def stop_leftover(self) -> None:
        """Stop a server that an earlier autotune started here and did not stop (it was killed).

        The pidfile records the group id and the kernel's start time of its
        leader, so a reused PID is never mistaken for the leftover.
        """
        pidfile = self.log_dir / PIDFILE
        pgid = self._leftover()
        if pgid is None:
            pidfile.unlink(missing_ok=True)
            return
        if self._proc is not None and self._proc.pid == pgid:
            return
        _log.warning("stopping a server left running by an earlier autotune", pgid=pgid)
        _signal_group(pgid, self._kill_signal)
        deadline = time.monotonic() + (self._stop_timeout or DEFAULT_STOP_TIMEOUT)
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
        pidfile.unlink(missing_ok=True)

    def _leftover(self) -> int | None:
        return leftover_server(self.log_dir)

    def port_held(self) -> str | None:
        """Who holds the server's port that a start would refuse (not the server an earlier
        autotune left here, which a start stops first); None when it is free or cannot be
        told."""
        found = ports.holders(self.port) if self.port is not None else None
        if not found:
            return None
        ours = self._leftover()
        if ours is not None and any(
            h.pid is not None and ports.in_group(h.pid, ours) for h in found
        ):
            return None
        return found[0].describe()

    def _write_pidfile(self, pid: int) -> None:
        started = _start_time(pid)
        if started is not None:
            (self.log_dir / PIDFILE).write_text(f"{pid} {started}\n")

    def restore(self) -> None:
        """Put the companion files back and start the user's original unit again."""
        self.stop()
        for path in self.companion_files:
            self._files.put_back(path)
        self.deploy(self.original_unit())

    def close(self) -> None:
        """Stop the child unless `keep_running`; remove the temporary log directory if unused.

        A stopped child needs no companion file: the user's own are put back (a kept child
        still reads the trial's; `autotune restore` puts them back later)."""
        if not self.keep_running:
            self.stop()
            for path in self.companion_files:
                self._files.put_back(path)
        self._scrub_log()  # a kept server goes on writing after the spans masked
        if self._own_dir and not (self.keep_running and self.is_running()):
            shutil.rmtree(self.log_dir, ignore_errors=True)
        if self._atexit_registered:
            atexit.unregister(self._at_exit)
            self._atexit_registered = False

    def _at_exit(self) -> None:
        if not self.keep_running:
            with contextlib.suppress(Exception):
                self.stop()

    # ------------------------------------------------------------------ extras

    def program_output(self, args: list[str], timeout: float = 300.0) -> ProgramOutput:
        """Run the unit's program (its command up to the first flag) with `args`, with the
        unit's environment and working directory: asks the installed server, say, which
        flags it has (`--help`) without starting it."""
        command = self._prepare(self.original_unit())
        head = program_words(command.argv)
        with tempfile.TemporaryFile() as out:
            try:
                proc = subprocess.Popen(
                    [*head, *args],
                    executable=command.executable,
                    env=command.env,
                    cwd=command.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                # What a shell would say, so that the host's failure reads the same either way.
                code = 126 if exc.errno in (errno.EACCES, errno.ENOEXEC) else 127
                return ProgramOutput(head, code, f"{command.executable}: {exc.strerror}")
            why = self._wait_for_answer(proc, timeout)
            out.seek(0)
            text = out.read().decode(errors="replace")
        if why is not None:
            return ProgramOutput(head, None, why)
        return ProgramOutput(head, proc.returncode, text)

    def _wait_for_answer(self, proc: subprocess.Popen[bytes], timeout: float) -> str | None:
        """Until `proc` exits; None then. A program that outlasts `timeout`, or that starts
        serving on the unit's port instead (a wrapper script that drops its arguments), is
        stopped with its whole group, and the reason returned."""
        deadline = time.monotonic() + timeout
        why = None
        while proc.poll() is None:
            if time.monotonic() > deadline:
                why = f"no answer within {timeout:.0f} s"
            elif self.port is not None and any(
                h.pid is not None and ports.in_group(h.pid, proc.pid)
                for h in ports.holders(self.port)
            ):
                why = f"it started serving on port {self.port} instead of answering"
            if why is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return why
            time.sleep(0.2)
        return None

    @property
    def pid(self) -> int | None:
        """PID of the current child (also its process group id), if one was started."""
        return None if self._proc is None else self._proc.pid

    @property
    def log_path(self) -> Path | None:
        """The log file of the current start."""
        return self._log_path

    def __enter__(self) -> LocalProcessDeployer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _scrub_log(self) -> None:
        if self._log_path is not None:
            secrets.scrub_file(self._log_path)

    def _write_working_copy(self, unit_text: str) -> None:
        copy = self.log_dir / f"current-{self.unit_path.name}"
        if copy.resolve() == self.unit_path.resolve():
            raise ConfigError(str(self.unit_path), None, "log_dir would overwrite the unit itself")
        tmp = copy.with_name(copy.name + ".tmp")
        tmp.write_bytes(unit_text.encode())
        os.replace(tmp, copy)

    def _prepare(self, unit_text: str) -> _Command:
        """Everything Popen needs, resolved from the unit as systemd would; errors name the unit."""
        name = self.unit_path.name
        exec_start = parse_exec_start(unit_text, source=name)
        specifiers = _specifiers(name)
        env = dict(self._base_env)
        for value in service_values(unit_text, "Environment"):
            # systemd expands specifiers in each assignment after unquoting it.
            for key, val in parse_environment(value, source=name).items():
                env[key] = _expand(val, specifiers, name, "Environment")
        for value in service_values(unit_text, "EnvironmentFile"):
            env.update(
                _read_environment_file(_expand(value, specifiers, name, "EnvironmentFile"), name)
            )
        # `/usr/bin/env autotune ...` must find this virtualenv's scripts first.
        venv_bin = os.path.dirname(sys.executable)
        env["PATH"] = os.pathsep.join([venv_bin, env.get("PATH", os.defpath)])

        executable, argv = expand_argv(exec_start, env, specifiers)
        return _Command(
            executable=_resolve_executable(executable, env["PATH"], name),
            argv=argv,
            env=env,
            cwd=_working_directory(unit_text, specifiers, name),
            kill_signal=_kill_signal(unit_text, name),
            stop_timeout=_stop_timeout(unit_text, name),
            exec_start=exec_start,
        )


@dataclass(frozen=True)
class ProgramOutput:
    """What the unit's program printed when asked, say, for its `--help`."""

    command: list[str]
    exit_code: int | None  # None: it gave no answer within the timeout
    text: str  # stdout then stderr; or why it could not run


def program_words(argv: Sequence[str]) -> list[str]:
    """The words of ExecStart that name the program, before its own flags:
    `/usr/bin/env llama-server`, `autotune sim`, `python3 -u -m sglang.launch_server`."""
    head = [argv[0]]
    rest = list(argv[1:])
    python = _is_python(argv[0])
    while rest:
        word = rest.pop(0)
        if word.startswith("-"):
            if not python:
                break
            head.append(word)  # the interpreter's own options, up to `-m MODULE`
            if word == "-m" and rest:
                head.append(rest.pop(0))
                break
            continue
        head.append(word)
        if python:
            break  # `python3 server.py`: what follows is the script's
        python = _is_python(word)  # `/usr/bin/env python3 -m …`
    return head


def _is_python(word: str) -> bool:
    return re.fullmatch(r"python[\d.]*", Path(word).name) is not None


@dataclass(frozen=True)
class _Command:
    executable: str
    argv: list[str]
    env: dict[str, str]
    cwd: str | None
    kill_signal: signal.Signals
    stop_timeout: float | None
    exec_start: ExecStart


# ---------------------------------------------------------------------- unit settings


def _specifiers(unit_name: str) -> dict[str, str]:
    stem = unit_name.removesuffix(".service")
    prefix, _, instance = stem.partition("@")
    return {
        "n": unit_name,
        "N": stem,
        "p": prefix,
        "i": instance,
        "I": instance,
        "h": str(Path.home()),
        "u": getpass.getuser(),
        "U": str(os.getuid()),
        "t": os.environ.get("XDG_RUNTIME_DIR", "/run"),
        "T": tempfile.gettempdir(),
        "H": socket.gethostname(),
    }


def _expand(value: str, specifiers: Mapping[str, str], unit: str, key: str) -> str:
    return expand_specifiers(value, specifiers, source=unit, key=key)


def _read_environment_file(value: str, unit: str) -> dict[str, str]:
    optional = value.startswith("-")
    path = Path(value[1:] if optional else value)
    try:
        return parse_environment_file(path.read_bytes().decode())
    except FileNotFoundError:
        if optional:
            return {}
        raise ConfigError(unit, "EnvironmentFile", f"{path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(unit, "EnvironmentFile", f"cannot read {path}: {exc}") from exc


def _working_directory(unit_text: str, specifiers: Mapping[str, str], unit: str) -> str | None:
    values = service_values(unit_text, "WorkingDirectory")
    if not values:
        return None
    value = _expand(values[-1], specifiers, unit, "WorkingDirectory")
    optional = value.startswith("-")
    value = value[1:] if optional else value
    if value == "~":
        value = str(Path.home())
    if not os.path.isabs(value):
        raise ConfigError(unit, "WorkingDirectory", f"{value!r} must be an absolute path or ~")
    if not os.path.isdir(value):
        if optional:
            return None
        raise ConfigError(unit, "WorkingDirectory", f"{value} does not exist")
    return value


def _resolve_executable(executable: str, path: str, unit: str) -> str:
    if os.path.isabs(executable):
        found = executable if os.access(executable, os.X_OK) else None
    elif "/" in executable:
        raise ConfigError(unit, "ExecStart", f"{executable}: a command path must be absolute")
    else:
        found = shutil.which(executable, path=path)
    if found is None or os.path.isdir(found):
        raise ConfigError(unit, "ExecStart", f"{executable} is not an executable file")
    return found


def _kill_signal(unit_text: str, unit: str) -> signal.Signals:
    values = service_values(unit_text, "KillSignal")
    if not values:
        return signal.SIGTERM
    name = values[-1].upper()
    try:
        if name.isdigit():
            return signal.Signals(int(name))
        return signal.Signals[name if name.startswith("SIG") else "SIG" + name]
    except (KeyError, ValueError):
        raise ConfigError(unit, "KillSignal", f"unknown signal {values[-1]!r}") from None


_TIME_UNITS = {
    "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3,
    "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "hours": 3600.0,
}  # fmt: skip


def _stop_timeout(unit_text: str, unit: str) -> float | None:
    """TimeoutStopSec= (or TimeoutSec=) in seconds, inf for `infinity`; None if not set."""
    values = service_values(unit_text, "TimeoutStopSec") or service_values(unit_text, "TimeoutSec")
    if not values:
        return None
    value = values[-1].strip()
    if value == "infinity":
        return float("inf")
    total = 0.0
    pos = 0
    for match in re.finditer(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)", value):
        if match.start() != pos or match.group(2) not in {"", *_TIME_UNITS}:
            break
        total += float(match.group(1)) * _TIME_UNITS.get(match.group(2), 1.0)
        pos = match.end()
    if pos != len(value) or not value:
        raise ConfigError(unit, "TimeoutStopSec", f"cannot read the time span {value!r}")
    return total


# ---------------------------------------------------------------------- process groups


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _group_alive(pgid: int) -> bool:
    """True while a non-zombie process is in the group.

    A zombie still counts for kill(0), and orphans whose new parent never
    reaps them would keep a group 'alive' for ever, hence /proc.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # comm may contain spaces and parentheses: the fields start after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def _wait_group(proc: subprocess.Popen[bytes], pgid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        proc.poll()  # reap the main process as soon as it exits
        if not _group_alive(pgid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL)


PIDFILE = "server.pid"


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces: split after its closing parenthesis.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])
