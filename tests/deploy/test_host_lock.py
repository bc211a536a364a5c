"""The host lock: exclusive, names its holder, dies with it, reclaims our own stale session."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from autotune.deploy.host_lock import HostLock, owner_text
from autotune.deploy.runner import LocalRunner
from autotune.errors import DeployError


def _lock(path: Path, owner: str) -> HostLock:
    return HostLock(LocalRunner(), str(path), sudo=False, owner=owner)


def _wait_until_dead(pid: int) -> None:
    # kill() returns before the process has exited and closed its files.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        time.sleep(0.01)
    raise AssertionError(f"process {pid} still alive")


def test_exclusive_with_the_holder_named(tmp_path: Path) -> None:
    path = tmp_path / "autotune.lock"
    first = _lock(path, owner_text("sglang.service"))
    first.ensure()
    assert first.held
    second = _lock(path, "someone else")
    assert second.holder() is not None and "sglang.service" in second.holder()  # type: ignore[operator]
    with pytest.raises(
        DeployError, match=rf"is held by \S+@\S+ pid {os.getpid()} since .*sglang.service"
    ):
        second.ensure()
    first.release()
    assert second.holder() is None
    second.ensure()
    second.release()


def test_probe_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "never.lock"
    assert _lock(path, "x").holder() is None
    assert not path.exists()


def test_released_when_the_holder_dies(tmp_path: Path) -> None:
    path = tmp_path / "autotune.lock"
    first = _lock(path, "first")
    first.ensure()
    holder_pid = int(path.read_text().split("holder_pid=")[1].split()[0])
    os.kill(holder_pid, signal.SIGKILL)  # the remote side of a crashed daemon's session
    _wait_until_dead(holder_pid)
    second = _lock(path, "second")
    second.ensure()
    assert "second" in path.read_text()
    second.release()
    first.release()


def test_own_stale_session_is_reclaimed(tmp_path: Path) -> None:
    # After a dropped link the old holder may live on until the host notices;
    # the same deployer (same token) replaces it instead of locking itself out.
    path = tmp_path / "autotune.lock"
    old = _lock(path, "me")
    old.ensure()
    new = _lock(path, "me")
    new._token = old._token
    new.ensure()
    assert new.held and not old.held
    new.release()
    old.release()
