"""A real OpenSSH `sshd` on 127.0.0.1 for tests, with its own host key and authorized keys.

Needs root (sshd's privilege separation) and Debian's `openssh-server`
(`apt-get install -y openssh-server`). Everything it starts is stopped by PID.

    with SshServer(tmp / "sshd") as server:
        key = keygen(tmp / "client")
        server.authorize("root", key)
        server.write_known_hosts(tmp / "known_hosts")
        ... connect to 127.0.0.1:server.port ...
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

from autotune.testservers.ports import free_port

SSHD = "/usr/sbin/sshd"
_READY_TIMEOUT_S = 10.0


def sshd_missing_reason() -> str | None:
    """Why a real sshd cannot run here, or None if it can."""
    if not Path(SSHD).exists():
        return "OpenSSH server missing: apt-get install -y openssh-server"
    if os.geteuid() != 0:
        return "sshd needs root (privilege separation, other users)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen missing: apt-get install -y openssh-client"
    return None


def keygen(path: Path, passphrase: str = "") -> Path:
    """A new ed25519 key pair at `path` (private) and `path`.pub; returns `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for old in (path, path.with_name(path.name + ".pub")):
        old.unlink(missing_ok=True)
    subprocess.run(
        [
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            passphrase,
            "-C",
            "autotune-test",
            "-f",
            str(path),
        ],
        check=True,
        capture_output=True,
    )
    return path


def public_key(private: Path) -> str:
    """'ssh-ed25519 AAAA...' (type and key, no comment)."""
    kind, blob, *_ = private.with_name(private.name + ".pub").read_text().split()
    return f"{kind} {blob}"


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 4 (ppid) follows the command name in parentheses, which may contain spaces.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _descendants(pid: int) -> list[int]:
    out = []
    for child in _children(pid):
        out += [child, *_descendants(child)]
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


class SshServer:
    """One sshd process listening on 127.0.0.1:`port` (kept across restarts)."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.keys_dir = self.dir / "authorized_keys"
        self.keys_dir.mkdir(exist_ok=True)
        self.host_key = keygen(self.dir / "ssh_host_ed25519_key")
        self.port = port or free_port()
        self.log = self.dir / "sshd.log"
        self._proc: subprocess.Popen[bytes] | None = None

    # -- keys -----------------------------------------------------------------

    def authorize(self, user: str, client_key: Path) -> None:
        path = self.keys_dir / user
        with path.open("a") as keys:
            keys.write(public_key(client_key) + "\n")
        path.chmod(0o644)

    def host_entry(self) -> str:
        return f"[127.0.0.1]:{self.port} {public_key(self.host_key)}"

    def write_known_hosts(self, path: Path) -> Path:
        path.write_text(self.host_entry() + "\n")
        return path

    def new_host_key(self) -> None:
        """Replace the host key (takes effect at the next start), as a reinstall would."""
        keygen(self.host_key)

    # -- process --------------------------------------------------------------

    def argv(self) -> list[str]:
        options = {
            "ListenAddress": "127.0.0.1",
            "HostKey": str(self.host_key),
            "AuthorizedKeysFile": f"{self.keys_dir}/%u",
            "PidFile": str(self.dir / "sshd.pid"),
            "StrictModes": "no",
            "UsePAM": "no",
            "PasswordAuthentication": "no",
            "KbdInteractiveAuthentication": "no",
            "PubkeyAuthentication": "yes",
            "PermitRootLogin": "prohibit-password",
            "MaxSessions": "50",
            "MaxStartups": "100",
            "LogLevel": "VERBOSE",
        }
        argv = [SSHD, "-D", "-e", "-f", "/dev/null", "-p", str(self.port)]
        for key, value in options.items():
            argv += ["-o", f"{key}={value}"]
        return argv

    def start(self) -> None:
        if self._proc is not None:
            raise RuntimeError("sshd already running")
        # Privilege-separation directory; sshd refuses to start without it.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as log:
            self._proc = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                text = self.log.read_bytes()[offset:].decode(errors="replace")
                self._proc = None
                raise RuntimeError(f"sshd exited at start:\n{text}")
            if b"Server listening on" in self.log.read_bytes()[offset:]:
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"sshd did not start listening within {_READY_TIMEOUT_S} s")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def connection_pids(self) -> list[int]:
        """The per-connection sshd processes (not the sessions' commands)."""
        if self._proc is None:
            return []
        return [p for p in _descendants(self._proc.pid) if _comm(p) == "sshd"]

    def stop(self) -> None:
        """Stop sshd and drop every connection at once, as a crash or cable pull would."""
        if self._proc is None:
            return
        # Collect the connection processes before the listener goes: after that
        # they are re-parented and no longer identifiable as ours.
        for pid in self.connection_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> SshServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
