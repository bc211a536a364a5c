"""Who listens on a TCP port of this machine: the server autotune started, or another.

Read from the kernel's own tables, as `ss -ltnp` does: `/proc/net/tcp` and `tcp6` list the
sockets in LISTEN state (st 0A) with their local port and inode, and `/proc/PID/fd/*` links
name the socket inodes each process holds. Any local address counts: a server on
0.0.0.0:30000 takes 127.0.0.1:30000 too. A process of another user shows its socket but
not its fds unless autotune runs as root: then the holder is "a process autotune cannot
see", and the port still counts as held.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Holder", "holders", "in_group"]

_LISTEN = "0A"
_PROC = Path("/proc")


@dataclass(frozen=True)
class Holder:
    """A process listening on the port; pid None when its fds cannot be read."""

    pid: int | None
    command: str = ""

    def describe(self) -> str:
        if self.pid is None:
            return "a process autotune cannot see (another user's: run as root, or `ss -ltnp`)"
        return f"pid {self.pid} ({self.command})" if self.command else f"pid {self.pid}"


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port:
                inodes.add(fields[9])
    return inodes


def holders(port: int) -> list[Holder] | None:
    """The processes listening on `port` ([] when none does); None when this system has no
    /proc to tell (the caller cannot know)."""
    if not (_PROC / "net" / "tcp").exists():
        return None
    inodes = _listening_inodes(port)
    if not inodes:
        return []
    wanted = {f"socket:[{i}]" for i in inodes}
    found: list[Holder] = []
    seen: set[str] = set()
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link in wanted:
                seen.add(link)
                found.append(Holder(int(entry.name), _command(int(entry.name))))
                break
    if len(seen) < len(wanted):
        found.append(Holder(None))  # a listener whose owner this user cannot read
    return found


def _command(pid: int) -> str:
    try:
        raw = (_PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(raw.decode(errors="replace").replace("\0", " ").split())
    return text if len(text) <= 120 else text[:119] + "…"


def in_group(pid: int, pgid: int) -> bool:
    """True when `pid` is in process group `pgid`, or descends from the process `pgid`
    (a server's helper that started a session of its own)."""
    seen = 0
    while pid > 1 and seen < 64:
        try:
            stat = (_PROC / str(pid) / "stat").read_text()
        except OSError:
            return False
        # comm may contain spaces and parentheses: the fields start after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if pid == pgid or fields[2] == str(pgid):
            return True
        pid = int(fields[1])
        seen += 1
    return False
