"""The benchmark's way to a server that listens only on the GPU host's loopback.

A local forward (`ssh -L` in OpenSSH's words) over the SSH connection the deployer
already holds: a listener on 127.0.0.1 here, on a port the OS picks (so a port taken on
the tuner's side never collides), and for each connection the benchmark opens, one
`direct-tcpip` channel to the server's address as the host sees it. The server's unit is
left as it is: no `--host 0.0.0.0`, nothing exposed to the network for the night.

The link may drop: a connection opened after it did reconnects as any SSH command does
(`SSHRunner.transport`), and each connection cut by the link, not by the server, is
counted, so that a level whose requests failed that way is the host's failure, retried
like any SSH drop, and never the config's (`broken_since`).
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from typing import Protocol

import paramiko

from autotune.errors import DeployError
from autotune.log import get

log = get(__name__)

_CHUNK = 65536
_POLL_S = 0.5


class _Link(Protocol):
    description: str

    def transport(self) -> paramiko.Transport: ...

    def run(self, argv: list[str]) -> object: ...


class Tunnel:
    """127.0.0.1:`local_port` here leads to `remote_host`:`remote_port` on the SSH host."""

    def __init__(self, link: _Link, remote_port: int, remote_host: str = "127.0.0.1") -> None:
        self._link = link
        self.remote_host = remote_host
        self.remote_port = remote_port
        self._listener: socket.socket | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._cuts: list[str] = []  # why each connection the link cut ended
        self._open: set[socket.socket] = set()
        self._primed: paramiko.Transport | None = None
        self.local_port = 0

    @property
    def description(self) -> str:
        there = f"{self.remote_host}:{self.remote_port}"
        return f"127.0.0.1:{self.local_port} -> {there} on {self._link.description}"

    def open(self) -> int:
        """Listen here; return the local port."""
        if self._listener is not None:
            return self.local_port
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(512)
        self._listener = listener
        self.local_port = listener.getsockname()[1]
        self._prime(self._link.transport())
        threading.Thread(target=self._accept, name="tunnel-accept", daemon=True).start()
        log.info("tunnel.open", tunnel=self.description)
        return self.local_port

    def mark(self) -> int:
        """A point in the tunnel's history, for `broken_since`."""
        with self._lock:
            return len(self._cuts)

    def broken_since(self, mark: int) -> str | None:
        """Why the link cut a connection after `mark`, or None when it cut none."""
        with self._lock:
            cuts = self._cuts[mark:]
        if not cuts:
            return None
        return f"the SSH link cut {len(cuts)} connection(s) through {self.description}: {cuts[-1]}"

    def close(self) -> None:
        self._closed.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        with self._lock:
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.close()

    # ------------------------------------------------------------------ inside
    def _accept(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            try:
                client, peer = self._listener.accept()
            except OSError:
                return  # closed
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(
                target=self._serve, args=(client, peer), name="tunnel-conn", daemon=True
            ).start()

    def _serve(self, client: socket.socket, peer: tuple[str, int]) -> None:
        with self._lock:
            self._open.add(client)
        transport: paramiko.Transport | None = None
        try:
            try:
                transport = self._prime(self._link.transport())
                channel = transport.open_channel(
                    "direct-tcpip", (self.remote_host, self.remote_port), peer, timeout=15
                )
            except paramiko.ChannelException as exc:
                # The host answered: nothing listens there (the server is down or loading).
                log.debug("tunnel.refused", tunnel=self.description, error=str(exc))
                return
            except (DeployError, paramiko.SSHException, OSError, EOFError) as exc:
                self._cut(str(exc) or type(exc).__name__)
                return
            try:
                _pump(client, channel, self._closed)
            except (OSError, EOFError, paramiko.SSHException):
                pass  # either side went away mid-stream: told apart below
            finally:
                with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
                    channel.close()  # on a dead link there is nobody to tell
            if not transport.is_active() and not self._closed.is_set():
                self._cut("the SSH connection closed")
        finally:
            with self._lock:
                self._open.discard(client)
            with contextlib.suppress(OSError):
                client.close()

    def _prime(self, transport: paramiko.Transport) -> paramiko.Transport:
        """Have both ends of a new connection send small packets at once. OpenSSH's sshd
        turns Nagle's algorithm off on its side at the connection's first session
        (`ssh_packet_set_interactive`, 9.2); a connection that has only forwarded keeps it,
        and each first token then waits for a delayed ACK: +38 ms TTFT at c=1, measured
        (experiments/results/tunnel_overhead.md). One no-op command starts that session."""
        with self._lock:
            if self._primed is transport:
                return transport
        with contextlib.suppress(OSError, AttributeError):
            transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._link.run(["true"])
        with self._lock:
            self._primed = transport
        return transport

    def _cut(self, why: str) -> None:
        with self._lock:
            self._cuts.append(why)
        log.warning("tunnel.cut", tunnel=self.description, error=why)


def _pump(client: socket.socket, channel: paramiko.Channel, closed: threading.Event) -> None:
    """Bytes both ways until either side closes."""
    while not closed.is_set():
        ready, _, _ = select.select([client, channel], [], [], _POLL_S)
        if channel in ready:
            data = channel.recv(_CHUNK)
            if not data:
                return
            client.sendall(data)
        if client in ready:
            try:
                data = client.recv(_CHUNK)
            except OSError:
                return
            if not data:
                return
            channel.sendall(data)
        if channel.closed or (channel.eof_received and not channel.recv_ready()):
            return
