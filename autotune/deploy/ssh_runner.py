"""Run commands on a remote host over one long-lived SSH connection (paramiko).

The connection stays open across trials (a trial is minutes; a handshake per
command would add up and spam auth logs), is kept alive, and is re-opened with
backoff when the link drops, so a network blip never looks like a crashed
server. Host keys are checked against a known_hosts file; an unknown key is
refused unless `accept_new_host_key` is set, and a changed key always is.
"""

from __future__ import annotations

import getpass
import os
import re
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import paramiko

from autotune import log
from autotune.deploy.runner import Process, Result, brief, command_line
from autotune.errors import DeployError

_HOST_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:_%-]*$")
_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]*$")
_READ_CHUNK = 65536
# Reconnect backoff: quick first retries for a blip, capped for a reboot.
_BACKOFF_FIRST_S = 0.5
_BACKOFF_MAX_S = 30.0
_OP_ATTEMPTS = 3


@dataclass(frozen=True)
class SSHSettings:
    """How to reach the GPU host (YAML: `target.ssh`)."""

    host: str
    user: str | None = None
    """Remote user; None means the local user name, as ssh does."""
    port: int = 22
    key_file: str | None = None
    """Private key; None means the SSH agent and ~/.ssh/id_* keys."""
    passphrase_env: str = "AUTOTUNE_SSH_PASSPHRASE"
    """Environment variable holding the key's passphrase (never put it in the YAML)."""
    use_agent: bool = True
    known_hosts: str = "~/.ssh/known_hosts"
    accept_new_host_key: bool = False
    """Trust and record a host key seen for the first time (a changed key is always refused)."""
    connect_timeout_s: float = 15.0
    command_timeout_s: float = 60.0
    keepalive_s: float = 15.0
    reconnect_timeout_s: float = 300.0
    """How long to keep re-trying a dropped link before giving up with DeployError."""
    sudo: bool | None = None
    """Prefix privileged commands with `sudo -n`; None means: when user is not root."""

    def __post_init__(self) -> None:
        if not _HOST_RE.match(self.host):
            raise ValueError(f"invalid host {self.host!r}")
        if self.user is not None and not _USER_RE.match(self.user):
            raise ValueError(f"invalid user {self.user!r}")
        if not 0 < self.port < 65536:
            raise ValueError(f"port {self.port} out of range 1-65535")
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", self.passphrase_env):
            raise ValueError(f"invalid environment variable name {self.passphrase_env!r}")
        timeouts = ("connect_timeout_s", "command_timeout_s", "keepalive_s", "reconnect_timeout_s")
        for name in timeouts:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")

    @property
    def login(self) -> str:
        return self.user or getpass.getuser()

    @property
    def needs_sudo(self) -> bool:
        return self.login != "root" if self.sudo is None else self.sudo

    @property
    def known_hosts_name(self) -> str:
        """How known_hosts names this host: `host`, or `[host]:port` off port 22."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    @property
    def known_hosts_path(self) -> Path:
        return Path(self.known_hosts).expanduser()


class _LinkLost(Exception):
    """The connection broke; the operation may be retried on a new one."""


class _Transient(Exception):
    """Connecting failed in a way that may succeed later (refused, timed out, reset)."""


def _why(exc: BaseException | None) -> str | None:
    """A connect failure in a person's words ("connection refused", not paramiko's repr)."""
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        errors = list(exc.errors.values())
        first = errors[0] if errors else None
        return (first.strerror or str(first)).lower() if first is not None else None
    if isinstance(exc, socket.timeout | TimeoutError):
        return "no answer (timed out)"
    if isinstance(exc, socket.gaierror):
        return f"unknown host name ({exc.strerror})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return None


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """Called by paramiko only for a host with no key at all in known_hosts."""

    def __init__(self, settings: SSHSettings) -> None:
        self._settings = settings

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        path = self._settings.known_hosts_path
        if not self._settings.accept_new_host_key:
            scan = f"ssh-keyscan -p {self._settings.port} {self._settings.host} >> {path}"
            raise DeployError(
                f"host key of {hostname} is unknown ({key.get_name()} {key.fingerprint}): "
                f"not in {path}. Compare it with `ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub` "
                f"on the host, then add it (`{scan}`) or set "
                "target.ssh.accept_new_host_key: true to trust a first-seen key"
            )
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            with os.fdopen(fd, "a", encoding="ascii") as known:
                known.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        except OSError as exc:
            raise DeployError(
                f"cannot record the host key of {hostname} in {path}: {exc.strerror}"
            ) from exc
        client.get_host_keys().add(hostname, key.get_name(), key)
        log.get(__name__).warning(
            "ssh.host_key_accepted",
            host=hostname,
            key=key.get_name(),
            fingerprint=key.fingerprint,
            file=str(path),
        )


class _SSHProcess:
    """A command on an open channel; ends when its stdin closes (channel or link gone)."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self._chan = channel
        self._buffer = b""

    def readline(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            if self._chan.recv_ready():
                chunk = self._chan.recv(_READ_CHUNK)
                if not chunk:
                    break
                self._buffer += chunk
                continue
            if self._chan.exit_status_ready() or self._chan.closed:
                # Data may have arrived together with the exit status.
                while self._chan.recv_ready():
                    self._buffer += self._chan.recv(_READ_CHUNK)
                break
            if time.monotonic() > deadline:
                raise DeployError(f"no answer from the remote command within {timeout:.0f} s")
            select.select([self._chan], [], [], 0.05)
        line, sep, rest = self._buffer.partition(b"\n")
        self._buffer = rest
        return (line + sep).decode("utf-8", errors="replace")

    def alive(self) -> bool:
        transport = self._chan.get_transport()
        return (
            not self._chan.closed
            and not self._chan.exit_status_ready()
            and transport is not None
            and transport.is_active()
        )

    def error_output(self) -> str:
        if not (self._chan.exit_status_ready() or self._chan.closed):
            return ""
        err = b""
        while self._chan.recv_stderr_ready():
            err += self._chan.recv_stderr(_READ_CHUNK)
        return err.decode("utf-8", errors="replace")

    def close(self) -> None:
        try:
            self._chan.shutdown_write()
            self._chan.status_event.wait(5)
        except (OSError, EOFError, paramiko.SSHException):
            pass
        self._chan.close()


class SSHRunner:
    """Runs argv lists on a remote host over one kept-open paramiko connection."""

    def __init__(
        self,
        settings: SSHSettings,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        self.description = f"ssh {settings.login}@{settings.host}:{settings.port}"
        self._sleep = sleep
        self._client: paramiko.SSHClient | None = None
        self._ever_connected = False
        self._connect_lock = threading.RLock()
        self._log = log.get(__name__).bind(target=self.description)

    # -- connection ---------------------------------------------------------

    def connect(self) -> None:
        """Open the connection now (it is opened lazily otherwise). Raises DeployError."""
        self._connected_client()

    def transport(self) -> paramiko.Transport:
        """The live connection, reconnecting as a command would (DeployError when it cannot):
        what a tunnel opens its channels on."""
        transport = self._connected_client().get_transport()
        if transport is None:
            raise DeployError(f"the SSH connection to {self.description} has no transport")
        return transport

    def _secret(self) -> str | None:
        return os.environ.get(self.settings.passphrase_env) or None

    def _redact(self, text: str) -> str:
        secret = self._secret()
        return text.replace(secret, "***") if secret else text

    def _load_key(self) -> paramiko.PKey | None:
        if self.settings.key_file is None:
            return None
        path = Path(self.settings.key_file).expanduser()
        env = self.settings.passphrase_env
        secret = self._secret()
        try:
            return paramiko.PKey.from_path(path, secret.encode() if secret else None)
        except FileNotFoundError as exc:
            raise DeployError(f"SSH key file {path} does not exist") from exc
        except PermissionError as exc:
            raise DeployError(f"SSH key file {path} is not readable") from exc
        except (
            paramiko.SSHException,
            paramiko.pkey.UnknownKeyType,
            ValueError,
            TypeError,
        ) as exc:
            # cryptography says "password was not provided" with a TypeError, paramiko
            # with PasswordRequiredException, depending on the key format.
            if secret is None and (
                isinstance(exc, paramiko.PasswordRequiredException) or "password" in str(exc)
            ):
                raise DeployError(
                    f"SSH key file {path} is encrypted: put its passphrase in ${env}"
                ) from exc
            hint = f" (wrong passphrase in ${env}?)" if secret else ""
            raise DeployError(f"cannot load SSH key file {path}{hint}") from exc

    def _connect_once(self) -> paramiko.SSHClient:
        """One attempt. Permanent failures raise DeployError, retryable ones _Transient."""
        settings = self.settings
        client = paramiko.SSHClient()
        known = settings.known_hosts_path
        try:
            if known.exists():
                client.load_host_keys(str(known))
        except (OSError, paramiko.SSHException) as exc:
            raise DeployError(f"cannot read known_hosts file {known}: {exc}") from exc
        client.set_missing_host_key_policy(_AcceptNewPolicy(settings))
        pkey = self._load_key()
        timeout = settings.connect_timeout_s
        try:
            client.connect(
                settings.host,
                port=settings.port,
                username=settings.login,
                pkey=pkey,
                passphrase=self._secret(),
                allow_agent=settings.use_agent,
                look_for_keys=settings.key_file is None,
                timeout=timeout,
                banner_timeout=timeout,
                auth_timeout=timeout,
                channel_timeout=timeout,
            )
        except DeployError:
            client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            client.close()
            name = settings.known_hosts_name
            raise DeployError(
                f"host key of {name} has CHANGED: it offers {exc.key.get_name()} "
                f"{exc.key.fingerprint}, {known} has {exc.expected_key.get_name()} "
                f"{exc.expected_key.fingerprint}. Either the host was reinstalled or someone "
                "is intercepting the connection; if you know the change is legitimate, remove "
                f"the old entry (`ssh-keygen -R '{name}' -f {known}`) and add the new key. "
                "Refusing to connect"
            ) from exc
        except paramiko.AuthenticationException as exc:
            client.close()
            how = (
                f"key file {settings.key_file}"
                if settings.key_file
                else "the SSH agent and ~/.ssh keys"
            )
            raise DeployError(
                f"SSH authentication as {settings.login}@{settings.host}:{settings.port} failed "
                f"with {how}: {self._redact(str(exc))}"
            ) from exc
        except (OSError, EOFError, paramiko.SSHException) as exc:
            client.close()
            raise _Transient(self._redact(str(exc) or type(exc).__name__)) from exc
        transport = client.get_transport()
        assert transport is not None
        transport.set_keepalive(max(1, round(settings.keepalive_s)))
        return client

    def _connected_client(self) -> paramiko.SSHClient:
        with self._connect_lock:
            client = self._client
            transport = client.get_transport() if client is not None else None
            if client is not None and transport is not None and transport.is_active():
                return client
            if client is not None:
                self._log.warning("ssh.link_lost", error="connection closed")
                client.close()
                self._client = None
            if not self._ever_connected:
                try:
                    self._client = self._connect_once()
                except _Transient as exc:
                    st = self.settings
                    raise DeployError(
                        f"cannot connect to {self.description}: {_why(exc.__cause__) or exc}. "
                        f"Check that {st.host} is up and its sshd listens on port {st.port} "
                        "(target.ssh.host, target.ssh.port)"
                    ) from exc
                self._ever_connected = True
                self._log.info("ssh.connected")
            else:
                self._client = self._reconnect()
            return self._client

    def _reconnect(self) -> paramiko.SSHClient:
        budget = self.settings.reconnect_timeout_s
        deadline = time.monotonic() + budget
        delay = _BACKOFF_FIRST_S
        while True:
            try:
                client = self._connect_once()
            except _Transient as exc:
                if time.monotonic() + delay > deadline:
                    raise DeployError(
                        f"lost the SSH connection to {self.description} and could not "
                        f"reconnect within {budget:.0f} s: {exc}"
                    ) from exc
                self._log.warning("ssh.reconnect_failed", error=str(exc), retry_in_s=delay)
                self._sleep(delay)
                delay = min(delay * 2, _BACKOFF_MAX_S)
                continue
            self._log.info("ssh.reconnected")
            return client

    def _drop(self) -> None:
        with self._connect_lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def _link_alive(self, transport: paramiko.Transport) -> bool:
        """Probe with a fresh channel: the only check that notices a half-open link."""
        try:
            probe = transport.open_session(timeout=self.settings.connect_timeout_s)
        except (OSError, EOFError, paramiko.SSHException):
            return False
        probe.close()
        return True

    # -- commands -----------------------------------------------------------

    def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        limit = self.settings.command_timeout_s if timeout is None else timeout
        lost: _LinkLost | None = None
        # Every command autotune sends is idempotent, so a dropped link means: reconnect, re-run.
        for _attempt in range(_OP_ATTEMPTS):
            client = self._connected_client()
            try:
                return self._exec(client, argv, stdin, limit)
            except _LinkLost as exc:
                lost = exc
                self._log.warning("ssh.link_lost", command=brief(argv), error=str(exc))
                self._drop()
        raise DeployError(
            f"SSH link to {self.description} kept dropping while running {brief(argv)}: {lost}"
        )

    def _open_channel(self, client: paramiko.SSHClient) -> paramiko.Channel:
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise _LinkLost("connection closed")
        try:
            return transport.open_session(timeout=self.settings.connect_timeout_s)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise _LinkLost(str(exc) or type(exc).__name__) from exc

    def _exec(
        self, client: paramiko.SSHClient, argv: Sequence[str], stdin: bytes | None, limit: float
    ) -> Result:
        chan = self._open_channel(client)
        transport = chan.get_transport()
        deadline = time.monotonic() + limit
        out, err = bytearray(), bytearray()
        try:
            chan.settimeout(limit)
            chan.exec_command(command_line(argv))
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            while True:
                progressed = False
                while chan.recv_ready():
                    out += chan.recv(_READ_CHUNK)
                    progressed = True
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(_READ_CHUNK)
                    progressed = True
                # sshd may send the exit status before the last output: done only
                # once the channel's EOF is in too, and everything is read.
                drained = not chan.recv_ready() and not chan.recv_stderr_ready()
                ended = chan.exit_status_ready() and (chan.eof_received or chan.closed)
                if ended and drained:
                    break
                if progressed:
                    continue
                if not transport.is_active():
                    raise _LinkLost("connection closed during the command")
                if time.monotonic() > deadline:
                    raise TimeoutError
                select.select([chan], [], [], 0.05)
        except TimeoutError as exc:
            chan.close()
            if not self._link_alive(transport):
                raise _LinkLost("no answer and the link is dead") from exc
            raise DeployError(
                f"{brief(argv)} on {self.description} timed out after {limit:.0f} s"
            ) from exc
        except (OSError, EOFError, paramiko.SSHException) as exc:
            chan.close()
            if not transport.is_active() or not self._link_alive(transport):
                raise _LinkLost(str(exc) or type(exc).__name__) from exc
            raise DeployError(f"{brief(argv)} on {self.description} failed: {exc}") from exc
        code = chan.recv_exit_status()
        chan.close()
        if code == -1 and not transport.is_active():
            raise _LinkLost("connection closed before the command's exit status arrived")
        return Result(tuple(argv), code, bytes(out), bytes(err))

    def start(self, argv: Sequence[str]) -> Process:
        for _attempt in range(_OP_ATTEMPTS):
            client = self._connected_client()
            try:
                chan = self._open_channel(client)
                chan.exec_command(command_line(argv))
                return _SSHProcess(chan)
            except _LinkLost:
                self._drop()
            except (OSError, EOFError, paramiko.SSHException) as exc:
                self._drop()
                self._log.warning("ssh.link_lost", command=brief(argv), error=str(exc))
        raise DeployError(
            f"SSH link to {self.description} kept dropping while starting {brief(argv)}"
        )

    def close(self) -> None:
        self._drop()
