"""One autotune per host: an flock on the host, held by a process that lives as long as we do.

The holder is a remote `cat` that keeps the locked file descriptor open and
reads its stdin; when the deployer closes, or its process or SSH link dies,
stdin ends and the kernel drops the lock, so a crashed daemon never leaves a
stale lock behind. The lock file names its holder for the next one to report.
(One worker per local server: run/server_lock.py; the study's proposals one at a time:
store/storage.proposal_lock.)
"""

from __future__ import annotations

import getpass
import os
import socket
import uuid
from datetime import datetime

from autotune import log
from autotune.deploy.hostfiles import SH, SUDO
from autotune.deploy.runner import Process, Runner
from autotune.errors import DeployError

_HELD = 75
_ANSWER_TIMEOUT_S = 30.0

# Args: lock file, our token, our owner text. Prints LOCKED then holds the
# lock until stdin closes, or prints HELD <holder> and exits 75. A holder with
# our own token is our session from before a dropped link: it is ended and
# replaced, since the same deployer cannot be its own rival.
_ACQUIRE = """
lock=$1 token=$2 owner=$3
exec 2>&1
exec 9<>"$lock" || exit 71
if ! flock -n 9; then
    holder=$(cat -- "$lock" 2>/dev/null || true)
    case $holder in
    *"token=$token "*)
        pid=${holder##*holder_pid=}; pid=${pid%%[!0-9]*}
        [ -n "$pid" ] && kill "$pid" 2>/dev/null
        flock -w 10 9 || { printf 'HELD %s\\n' "$holder"; exit 75; } ;;
    *)
        printf 'HELD %s\\n' "$holder"; exit 75 ;;
    esac
fi
printf '%s\\ntoken=%s holder_pid=%s\\n' "$owner" "$token" "$$" > "$lock"
echo LOCKED
exec cat > /dev/null
"""

# Args: lock file. Exit 0 if free (or absent), else print the holder and exit
# 75. Opens read-only and never creates the file: preflight changes nothing.
_PROBE = """
lock=$1
[ -e "$lock" ] || exit 0
exec 9<"$lock" || exit 71
flock -n -s 9 && exit 0
cat -- "$lock"
exit 75
"""


def owner_text(what: str) -> str:
    """Who we are, for the message another autotune shows when it finds the lock taken."""
    since = datetime.now().astimezone().isoformat(timespec="seconds")
    return f"{getpass.getuser()}@{socket.gethostname()} pid {os.getpid()} since {since} ({what})"


def _holder(text: str) -> str:
    # The owner line only; the token line is ours, not the user's business.
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first or "an unknown process"


class HostLock:
    """An exclusive lock on `path` on the host behind `runner`."""

    def __init__(self, runner: Runner, path: str, *, sudo: bool, owner: str) -> None:
        self._runner = runner
        self.path = path
        self._prefix: tuple[str, ...] = SUDO if sudo else ()
        self._owner = owner
        self._token = uuid.uuid4().hex
        self._proc: Process | None = None
        self._log = log.get(__name__).bind(lock=path, target=runner.description)

    @property
    def held(self) -> bool:
        return self._proc is not None and self._proc.alive()

    def ensure(self) -> None:
        """Hold the lock (again, if a dropped link released it). DeployError if another has it."""
        if self.held:
            return
        if self._proc is not None:
            self._log.warning("lock.lost_with_link")
            self._proc.close()
            self._proc = None
        args = [self.path, self._token, self._owner]
        argv = [*self._prefix, SH, "-c", _ACQUIRE, "autotune-lock", *args]
        proc = self._runner.start(argv)
        line = proc.readline(_ANSWER_TIMEOUT_S).strip()
        if line == "LOCKED":
            self._proc = proc
            self._log.info("lock.acquired")
            return
        rest = "".join(iter(lambda: proc.readline(_ANSWER_TIMEOUT_S), ""))
        error = proc.error_output().strip()
        proc.close()
        if line.startswith("HELD"):
            holder = _holder(line[len("HELD") :] + "\n" + rest)
            raise DeployError(
                f"{self.path} on {self._runner.description} is held by {holder}: "
                "another autotune is deploying to this host"
            )
        detail = " ".join(part for part in (line, rest.strip(), error) if part) or "no answer"
        where = self._runner.description
        raise DeployError(f"cannot take the lock {self.path} on {where}: {detail}")

    def holder(self) -> str | None:
        """Who holds the lock now (None if free). Changes nothing on the host."""
        if self.held:
            return None
        argv = [*self._prefix, SH, "-c", _PROBE, "autotune-lock", self.path]
        result = self._runner.run(argv)
        if result.ok:
            return None
        if result.exit_code == _HELD:
            return _holder(result.out)
        detail = result.err.strip() or result.out.strip() or f"exit code {result.exit_code}"
        where = self._runner.description
        raise DeployError(f"cannot check the lock {self.path} on {where}: {detail}")

    def release(self) -> None:
        if self._proc is not None:
            self._proc.close()
            self._proc = None
            self._log.info("lock.released")
