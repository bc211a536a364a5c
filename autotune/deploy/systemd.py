"""A Deployer for a systemd service, on this machine or over SSH (whichever `Runner` it gets).

One deploy: take the host lock, back the original unit up once, write the new
unit atomically, `daemon-reload`, (optionally stop and wait for free GPUs,)
restart. Each start is identified by systemd's InvocationID, so the state and
the log reported are those of this start only, even if something restarts the
unit behind our back.

A server that fails to start is not an error here: `is_running()`,
`exit_status()` and `logs()` report it and the caller classifies it.
`DeployError` is only for the transport and the host (SSH, sudo, disk).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from autotune import log
from autotune.deploy.gpu_wait import GpuWaitSettings, gpu_processes, wait_for_free_gpus
from autotune.deploy.host_lock import HostLock, owner_text
from autotune.deploy.hostfiles import SH, SUDO, HostFiles, check_path
from autotune.deploy.runner import Result, Runner
from autotune.deploy.tunnel import Tunnel
from autotune.errors import DeployError
from autotune.unit import secrets

UNIT_NAME_RE = re.compile(r"^[A-Za-z0-9:_.@-]+\.service$")
_COMMAND_RE = re.compile(r"^[A-Za-z0-9_.+-]+$")
_RUNNING_STATES = frozenset({"active", "activating", "reloading", "refreshing"})
_STATE_PROPERTIES = (
    "ActiveState",
    "SubState",
    "Result",
    "MainPID",
    "ExecMainPID",
    "ExecMainCode",
    "ExecMainStatus",
    "ExecMainStartTimestamp",
    "ExecMainExitTimestamp",
    "InvocationID",
    "NRestarts",
)
# siginfo codes systemd reports in ExecMainCode.
_CLD_EXITED = 1
#: exit_status() when systemd itself restarted the unit (Restart=) after our
#: start ended: the code of our start is gone by then.
EXIT_UNKNOWN = 1


def check_unit_name(unit: str) -> str:
    if not UNIT_NAME_RE.match(unit) or unit.startswith("-"):
        raise ValueError(
            f"unit name {unit!r} is not a service name "
            "(letters, digits and ':_.@-', ending in .service)"
        )
    return unit


def _check_command(value: str, what: str) -> str:
    if value.startswith("/"):
        return check_path(value, what)
    if not _COMMAND_RE.match(value):
        raise ValueError(f"{what} must be a command name or an absolute path, got {value!r}")
    return value


@dataclass(frozen=True)
class SystemdSettings:
    """Which unit to tune and how to drive systemd on the host (YAML: `target`)."""

    unit: str
    unit_file: str | None = None
    """Where the unit file is; None means /etc/systemd/system/<unit>."""
    backup_file: str | None = None
    """Where the original unit is kept during a study; None means <unit_file>.autotune-orig."""
    lock_file: str = "/run/lock/autotune.lock"
    """One lock per host, so two autotune daemons never deploy to the same host."""
    log_file: str | None = None
    """Read the server's log from this file instead of the journal (StandardOutput=append:...)."""
    systemctl: str = "systemctl"
    journalctl: str = "journalctl"
    restart_timeout_s: float = 300.0
    """For `systemctl restart/stop`, which wait for the old server to shut down."""
    companion_files: tuple[str, ...] = ()
    """Files the search space writes beside the unit (backed up once, put back by restore)."""

    def __post_init__(self) -> None:
        check_unit_name(self.unit)
        for name in ("unit_file", "backup_file", "lock_file", "log_file"):
            value = getattr(self, name)
            if value is not None:
                check_path(value, name)
        for path in self.companion_files:
            check_path(path, "a companion file")
        _check_command(self.systemctl, "systemctl")
        _check_command(self.journalctl, "journalctl")
        if self.restart_timeout_s <= 0:
            raise ValueError("restart_timeout_s must be > 0")
        if self.resolved_backup_file == self.resolved_unit_file:
            raise ValueError("backup_file must differ from unit_file")

    @property
    def resolved_unit_file(self) -> str:
        return self.unit_file or f"/etc/systemd/system/{self.unit}"

    @property
    def resolved_backup_file(self) -> str:
        return self.backup_file or f"{self.resolved_unit_file}.autotune-orig"


#: On the host, with the port and the unit's MainPID: `ours` when a process listening on the
#: port is MainPID or descends from it, `other pid N (command)` when none does, `none` or
#: `unknown` when nothing listens or the listener's owner cannot be read (another user's fds
#: need root). Reads the kernel's tables as `ss -ltnp` does: LISTEN sockets (st 0A) in
#: /proc/net/tcp{,6}, their inodes among /proc/PID/fd links, parents from /proc/PID/stat.
_LISTENER = r"""
port=$(printf '%04X' "$1"); main=$2; other=
inodes=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
  while read -r _ local _ st _ _ _ _ _ inode _; do
    [ "$st" = 0A ] && [ "${local##*:}" = "$port" ] && echo "$inode"
  done)
[ -n "$inodes" ] || { echo none; exit 0; }
for inode in $inodes; do
  pids=$(find /proc/[0-9]*/fd -lname "socket:\[$inode\]" 2>/dev/null | cut -d/ -f3 | sort -u)
  for p in $pids; do
    q=$p; n=0
    while [ "$q" -gt 1 ] && [ "$n" -lt 64 ]; do
      [ "$q" = "$main" ] && { echo ours; exit 0; }
      q=$(sed 's/.*) //' "/proc/$q/stat" 2>/dev/null | cut -d' ' -f2); [ -n "$q" ] || break
      n=$((n + 1))
    done
    other="pid $p ($(tr '\0\n' '  ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-120))"
  done
done
[ -n "$other" ] && echo "other $other" || echo unknown
"""


@dataclass(frozen=True)
class UnitState:
    """What `systemctl show` says about the unit now."""

    active_state: str
    sub_state: str
    result: str
    main_pid: int
    exec_main_pid: int
    exec_main_code: int
    exec_main_status: int
    started_at: str
    exited_at: str
    invocation_id: str
    n_restarts: int
    raw: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> UnitState:
        values: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip()

        def number(key: str) -> int:
            try:
                return int(values.get(key) or 0)
            except ValueError:
                return 0

        return cls(
            active_state=values.get("ActiveState", ""),
            sub_state=values.get("SubState", ""),
            result=values.get("Result", ""),
            main_pid=number("MainPID"),
            exec_main_pid=number("ExecMainPID"),
            exec_main_code=number("ExecMainCode"),
            exec_main_status=number("ExecMainStatus"),
            started_at=values.get("ExecMainStartTimestamp", ""),
            exited_at=values.get("ExecMainExitTimestamp", ""),
            invocation_id=values.get("InvocationID", ""),
            n_restarts=number("NRestarts"),
            raw=values,
        )

    @property
    def process_alive(self) -> bool:
        return self.main_pid != 0 and self.active_state in _RUNNING_STATES

    @property
    def exit_code(self) -> int:
        """Exit code of the last main process; death by signal N reads 128 + N, as in a shell."""
        if self.exec_main_code in (0, _CLD_EXITED):
            return self.exec_main_status
        return 128 + self.exec_main_status


@dataclass(frozen=True)
class _Start:
    """One start made by this deployer."""

    invocation_id: str
    log_offset: int


class SystemdDeployer:
    """`autotune.deploy.base.Deployer` for a systemd unit on the host behind `runner`."""

    def __init__(
        self,
        runner: Runner,
        settings: SystemdSettings,
        *,
        sudo: bool,
        gpu_wait: GpuWaitSettings | None = None,
        owner: str | None = None,
    ) -> None:
        self.settings = settings
        self.description = f"{settings.unit} via {runner.description}"
        self._runner = runner
        self._sudo = sudo
        self._gpu_wait = gpu_wait
        self._files = HostFiles(runner, sudo=sudo)
        self._lock = HostLock(
            runner, settings.lock_file, sudo=sudo, owner=owner or owner_text(settings.unit)
        )
        self._start: _Start | None = None
        self._backed_up = False
        self.port: int | None = None
        """The TCP port the server listens on: whoever holds it once it answers must be the
        unit's main process or one of its children."""
        self._log = log.get(__name__).bind(unit=settings.unit, target=runner.description)
        self.tunnel: Tunnel | None = None

    def forward(self, port: int, host: str = "127.0.0.1") -> Tunnel | None:
        """A local forward to `host:port` as the host sees it, over this deployer's SSH
        connection (opened once, closed with the deployer); None where there is no SSH
        link (this machine's systemd: the server is reached directly)."""
        if not hasattr(self._runner, "transport"):
            return None
        if self.tunnel is None:
            tunnel = Tunnel(self._runner, port, host)  # type: ignore[arg-type]
            tunnel.open()
            self.tunnel = tunnel
        return self.tunnel

    # -- commands -------------------------------------------------------------

    def _priv(self, argv: list[str]) -> list[str]:
        return [*SUDO, *argv] if self._sudo else argv

    def _systemctl(self, *args: str, timeout: float | None = None) -> Result:
        return self._runner.run(self._priv([self.settings.systemctl, *args]), timeout=timeout)

    def _must(self, result: Result, what: str) -> Result:
        if not result.ok:
            detail = result.err.strip() or result.out.strip() or f"exit code {result.exit_code}"
            raise DeployError(f"{what} on {self._runner.description} failed: {detail}")
        return result

    def state(self) -> UnitState:
        """The unit's state now (for `autotune status` and the checks below)."""
        result = self._systemctl("show", "-p", ",".join(_STATE_PROPERTIES), self.settings.unit)
        self._must(result, f"systemctl show {self.settings.unit}")
        return UnitState.parse(result.out)

    def _daemon_reload(self) -> None:
        self._must(self._systemctl("daemon-reload"), "systemctl daemon-reload")

    def _unit_action(self, action: str) -> None:
        """`systemctl stop|start UNIT`, which wait for the server to shut down or fork."""
        unit = self.settings.unit
        result = self._systemctl(action, unit, timeout=self.settings.restart_timeout_s)
        self._must(result, f"systemctl {action} {unit}")

    # -- Deployer -------------------------------------------------------------

    def preflight(self) -> None:
        """Check connection, sudo rights, the unit, the lock and the GPU check; change nothing."""
        s = self.settings
        who = self._must(self._runner.run(["id", "-un"]), "running `id -un`").out.strip()
        if self._sudo:
            needed = [SH, s.systemctl] + ([] if s.log_file else [s.journalctl])
            for command in needed:
                probe = self._runner.run(["sudo", "-n", "-l", "--", command])
                if not probe.ok:
                    detail = probe.err.strip() or probe.out.strip()
                    raise DeployError(
                        f"user {who} on {self._runner.description} may not run `{command}` with "
                        f"`sudo -n` (passwordless): {detail or 'refused'}. Grant it in sudoers "
                        "(see docs/deploy.md) or connect as root"
                    )
        unit_file = s.resolved_unit_file
        if self._files.read(unit_file) is None:
            raise DeployError(f"unit file {unit_file} does not exist on {self._runner.description}")
        loaded = self._systemctl("show", "-p", "LoadState,FragmentPath,DropInPaths", s.unit)
        info = UnitState.parse(self._must(loaded, f"systemctl show {s.unit}").out).raw
        if info.get("LoadState") != "loaded":
            raise DeployError(
                f"systemd does not know {s.unit} (LoadState={info.get('LoadState')}) "
                f"on {self._runner.description}"
            )
        fragment = info.get("FragmentPath", "")
        if fragment and fragment != unit_file:
            raise DeployError(
                f"systemd loads {s.unit} from {fragment}, not {unit_file}: set target.unit_file"
            )
        if info.get("DropInPaths"):
            self._log.warning(
                "preflight.drop_ins",
                paths=info["DropInPaths"],
                note="drop-ins can override the ExecStart autotune writes",
            )
        self._files.check_dir_writable(unit_file)
        self._files.check_dir_writable(s.resolved_backup_file)
        holder = self._lock.holder()
        if holder is not None:
            raise DeployError(
                f"{s.lock_file} on {self._runner.description} is held by {holder}: "
                "another autotune is deploying to this host"
            )
        if self._files.exists(s.resolved_backup_file):
            self._log.info(
                "preflight.backup_found",
                backup=s.resolved_backup_file,
                note="an earlier study's original unit; it will be restored at the end",
            )
        if self._gpu_wait is not None:
            gpu_processes(self._runner, self._gpu_wait)
        self._log.info("preflight.ok", user=who, sudo=self._sudo)

    def _ensure_backup(self) -> None:
        self._lock.ensure()
        if self._backed_up:
            return
        s = self.settings
        if self._files.backup_once(s.resolved_unit_file, s.resolved_backup_file):
            self._log.info("unit.backed_up", backup=s.resolved_backup_file)
        self._backed_up = True

    def original_unit(self) -> str:
        """The unit as it was before the study; backed up on the host the first time."""
        self._ensure_backup()
        s = self.settings
        original = self._files.read(s.resolved_backup_file)
        if original is None:
            where = self._runner.description
            raise DeployError(f"backup {s.resolved_backup_file} vanished on {where}")
        return original.decode("utf-8", errors="replace")

    def current_unit(self) -> str | None:
        """The unit file as it is on the host now (None if it does not exist)."""
        text = self._files.read(self.settings.resolved_unit_file)
        return None if text is None else text.decode("utf-8", errors="replace")

    def deploy(self, unit_text: str, files: Mapping[str, str | None] | None = None) -> None:
        self._ensure_backup()
        for path, text in (files or {}).items():
            if self._files.keep_original(path) != "kept":
                self._log.info("companion.backed_up", path=path)
            if text is None:
                self._files.remove(path)
            else:
                self._files.write_atomic(path, text.encode("utf-8"))
                self._log.info("companion.written", path=path)
        self._files.write_atomic(self.settings.resolved_unit_file, unit_text.encode("utf-8"))
        self._log.info("unit.written", path=self.settings.resolved_unit_file)
        # Always: without it systemd would restart the previous config.
        self._daemon_reload()
        self._fresh_start(gpu_wait_strict=True)

    def _fresh_start(self, *, gpu_wait_strict: bool) -> None:
        s = self.settings
        before = self.state().invocation_id
        offset = self._files.size(s.log_file) if s.log_file else 0
        # A few quick crashes in a row would trip systemd's start rate limit.
        self._systemctl("reset-failed", s.unit)
        if self._gpu_wait is None:
            action = "restart"
        else:
            action = "start"
            self._unit_action("stop")
            try:
                waited = wait_for_free_gpus(self._runner, self._gpu_wait)
                if waited:
                    self._log.info("gpu_wait.done", waited_s=round(waited, 1))
            except DeployError:
                if gpu_wait_strict:
                    raise
                # Restoring: a server on busy GPUs beats no server at all.
                self._log.warning("gpu_wait.gave_up", note="starting anyway to restore the service")
        started = self._systemctl(action, s.unit, timeout=s.restart_timeout_s)
        after = self.state()
        if after.invocation_id and after.invocation_id != before:
            # A start happened. If systemctl still failed, the server did (it died
            # during startup): that is the config's business, not ours.
            if not started.ok:
                self._log.info("unit.start_failed", detail=started.err.strip())
            self._start = _Start(after.invocation_id, offset)
            self._log.info("unit.started", invocation=after.invocation_id, pid=after.main_pid)
            return
        self._must(started, f"systemctl {action} {s.unit}")
        raise DeployError(
            f"systemctl {action} {s.unit} on {self._runner.description} succeeded but systemd "
            "reports no new start (InvocationID unchanged; systemd older than 232?)"
        )

    def _ours(self, state: UnitState) -> bool:
        return self._start is None or state.invocation_id == self._start.invocation_id

    def is_running(self) -> bool:
        state = self.state()
        return self._ours(state) and state.process_alive

    def answering(self) -> str | None:
        """Who listens on the server's port when it is not the unit's main process or one of
        its children (a server left running outside the unit, or a second instance); None when
        it is the unit's, or the host does not let this user tell."""
        if self.port is None:
            return None
        main = self.state().main_pid
        if not main:
            return None
        found = self._runner.run([SH, "-c", _LISTENER, "sh", str(self.port), str(main)])
        words = found.out.strip()
        if not found.ok or not words.startswith("other "):
            return None  # ours, nobody (a proxy in front), or not readable here
        return words.removeprefix("other ")

    def exit_status(self) -> int | None:
        state = self.state()
        if not self._ours(state):
            return EXIT_UNKNOWN
        if state.process_alive:
            return None
        return state.exit_code

    def logs(self) -> str:
        """The current start's journal (or `log_file`), its secrets masked."""
        s = self.settings
        if s.log_file:
            offset = self._start.log_offset if self._start else 0
            text = self._files.read_from(s.log_file, offset).decode("utf-8", errors="replace")
            return secrets.text(text)
        invocation = self._start.invocation_id if self._start else self.state().invocation_id
        if not invocation:
            return ""
        match = f"_SYSTEMD_INVOCATION_ID={invocation}"
        result = self._runner.run(
            self._priv([s.journalctl, match, "-o", "cat", "--no-pager", "-q"])
        )
        return secrets.text(self._must(result, f"journalctl for {s.unit}").out)

    def stop(self) -> None:
        self._lock.ensure()
        self._unit_action("stop")

    def restore(self) -> None:
        """Put the original unit back (byte for byte) and restart the service with it."""
        self._lock.ensure()
        s = self.settings
        for path in s.companion_files:
            done = self._files.put_back(path)
            if done != "untouched":
                self._log.info("companion." + done, path=path)
        if not self._files.exists(s.resolved_backup_file):
            # Nothing was changed by a study; only make sure the service runs.
            self._log.info("restore.no_backup", backup=s.resolved_backup_file)
            self._unit_action("start")
            return
        self._files.copy_atomic(s.resolved_backup_file, s.resolved_unit_file)
        self._daemon_reload()
        self._fresh_start(gpu_wait_strict=False)
        self._log.info("unit.restored", path=s.resolved_unit_file)

    def forget_original(self) -> None:
        """Delete the backup once a study is over, so the next study backs up the unit afresh."""
        self._lock.ensure()
        self._files.remove(self.settings.resolved_backup_file)
        for path in self.settings.companion_files:
            self._files.forget_original(path)
        self._backed_up = False

    def close(self) -> None:
        try:
            self._lock.release()
        finally:
            if self.tunnel is not None:
                self.tunnel.close()
            self._runner.close()

    def __enter__(self) -> SystemdDeployer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
