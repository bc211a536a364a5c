"""Files on the target host: read, atomic write, backup-once, copy back.

Every operation is one constant `/bin/sh` script with the paths passed as
positional arguments (never spliced into the script), run through `sudo -n`
when the login user is not root. The unit directory is root's, so SFTP
would not do; one round trip per operation also keeps SSH latency low.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from autotune.deploy.runner import Result, Runner
from autotune.errors import DeployError

SH = "/bin/sh"
SUDO = ("sudo", "-n", "--")
_MISSING = 44
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

_READ = """
[ -e "$1" ] || exit 44
exec cat -- "$1"
"""

_SIZE = """
[ -e "$1" ] || { echo 0; exit 0; }
stat -c %s -- "$1"
"""

# tail -c +N prints from byte N (1-based); a file shorter than the offset was
# rotated or truncated, so it is read from its start instead.
_READ_FROM = """
[ -e "$1" ] || exit 0
size=$(stat -c %s -- "$1")
if [ "$size" -lt "$2" ]; then exec cat -- "$1"; fi
exec tail -c +"$(( $2 + 1 ))" -- "$1"
"""

# The temporary file lives in the target's directory so the final mv is a
# rename(2): readers (systemd) see the old file or the new one, never a part.
_WRITE_ATOMIC = """
set -eu
target=$1
dir=$(dirname -- "$target")
base=$(basename -- "$target")
tmp=$(mktemp -- "$dir/.$base.autotune-XXXXXX")
trap 'rm -f -- "$tmp"' EXIT HUP INT TERM
cat > "$tmp"
if [ -e "$target" ]; then
    chmod --reference="$target" -- "$tmp"
    chown --reference="$target" -- "$tmp" 2>/dev/null || true
else
    chmod 0644 -- "$tmp"
fi
sync -- "$tmp" 2>/dev/null || sync
mv -f -- "$tmp" "$target"
trap - EXIT HUP INT TERM
sync -- "$dir" 2>/dev/null || true
"""

# Copy `src` over `dst` byte for byte (mode and owner of src kept), atomically.
_COPY_ATOMIC = """
set -eu
src=$1 dst=$2
[ -e "$src" ] || { echo "$src does not exist" >&2; exit 44; }
dir=$(dirname -- "$dst")
base=$(basename -- "$dst")
tmp=$(mktemp -- "$dir/.$base.autotune-XXXXXX")
trap 'rm -f -- "$tmp"' EXIT HUP INT TERM
cp -p -- "$src" "$tmp"
sync -- "$tmp" 2>/dev/null || sync
mv -f -- "$tmp" "$dst"
trap - EXIT HUP INT TERM
sync -- "$dir" 2>/dev/null || true
"""

# link(2) fails if the backup exists, so a backup is never overwritten, and it
# appears complete or not at all. Prints "created" or "exists".
_BACKUP_ONCE = """
set -eu
src=$1 backup=$2
if [ -e "$backup" ]; then echo exists; exit 0; fi
[ -e "$src" ] || { echo "$src does not exist" >&2; exit 44; }
dir=$(dirname -- "$backup")
base=$(basename -- "$backup")
tmp=$(mktemp -- "$dir/.$base.autotune-XXXXXX")
trap 'rm -f -- "$tmp"' EXIT HUP INT TERM
cp -p -- "$src" "$tmp"
sync -- "$tmp" 2>/dev/null || sync
if ln -- "$tmp" "$backup" 2>/dev/null; then echo created; else echo exists; fi
sync -- "$dir" 2>/dev/null || true
"""

_REMOVE = """
rm -f -- "$1"
"""

# A companion file may not exist before the study: its backup is then an empty
# marker `<file>.autotune-absent`, so that a restore (even by another process
# after a crash) knows to remove the file rather than leave the last trial's.
_KEEP_ORIGINAL = """
set -eu
src=$1 backup=$2 absent=$3
if [ -e "$backup" ] || [ -e "$absent" ]; then echo kept; exit 0; fi
dir=$(dirname -- "$backup")
base=$(basename -- "$backup")
tmp=$(mktemp -- "$dir/.$base.autotune-XXXXXX")
trap 'rm -f -- "$tmp"' EXIT HUP INT TERM
if [ -e "$src" ]; then
    cp -p -- "$src" "$tmp"
    sync -- "$tmp" 2>/dev/null || sync
    if ln -- "$tmp" "$backup" 2>/dev/null; then echo created; else echo kept; fi
else
    if ln -- "$tmp" "$absent" 2>/dev/null; then echo absent; else echo kept; fi
fi
sync -- "$dir" 2>/dev/null || true
"""

# Put the original back (or remove the file when there was none), then drop the backup.
_PUT_BACK = """
set -eu
dst=$1 backup=$2 absent=$3
if [ -e "$backup" ]; then
    dir=$(dirname -- "$dst")
    base=$(basename -- "$dst")
    tmp=$(mktemp -- "$dir/.$base.autotune-XXXXXX")
    trap 'rm -f -- "$tmp"' EXIT HUP INT TERM
    cp -p -- "$backup" "$tmp"
    sync -- "$tmp" 2>/dev/null || sync
    mv -f -- "$tmp" "$dst"
    trap - EXIT HUP INT TERM
    rm -f -- "$backup"
    echo restored
elif [ -e "$absent" ]; then
    rm -f -- "$dst" "$absent"
    echo removed
else
    echo untouched
fi
sync -- "$(dirname -- "$dst")" 2>/dev/null || true
"""


def companion_backup(path: str) -> tuple[str, str]:
    """(backup, absent marker) of a companion file."""
    return f"{path}.autotune-orig", f"{path}.autotune-absent"


_WRITABLE_DIR = """
dir=$(dirname -- "$1")
[ -d "$dir" ] || { echo "directory $dir does not exist" >&2; exit 1; }
[ -w "$dir" ] || { echo "directory $dir is not writable" >&2; exit 1; }
"""


def check_path(path: str, what: str) -> str:
    """`path` if it is absolute, normalised and free of control characters; else ValueError."""
    if not path.startswith("/") or path == "/":
        raise ValueError(f"{what} must be an absolute path to a file, got {path!r}")
    if _CONTROL.search(path):
        raise ValueError(f"{what} contains a control character: {path!r}")
    if os.path.normpath(path) != path or path.startswith("//"):
        raise ValueError(
            f"{what} must be a normalised path (no '..', '//', trailing '/'): {path!r}"
        )
    return path


class HostFiles:
    """File operations on the host behind `runner`, privileged when `sudo` is set."""

    def __init__(self, runner: Runner, *, sudo: bool) -> None:
        self._runner = runner
        self._prefix: tuple[str, ...] = SUDO if sudo else ()

    def _sh(self, script: str, args: Sequence[str], *, stdin: bytes | None = None) -> Result:
        # "$0" is the script's name in messages; the arguments follow it.
        argv = [*self._prefix, SH, "-c", script, "autotune", *args]
        return self._runner.run(argv, stdin=stdin)

    def _fail(self, what: str, result: Result) -> DeployError:
        detail = result.err.strip() or result.out.strip() or f"exit code {result.exit_code}"
        return DeployError(f"{what} on {self._runner.description} failed: {detail}")

    def read(self, path: str) -> bytes | None:
        """The file's bytes, or None if it does not exist."""
        result = self._sh(_READ, [path])
        if result.exit_code == _MISSING:
            return None
        if not result.ok:
            raise self._fail(f"reading {path}", result)
        return result.stdout

    def exists(self, path: str) -> bool:
        result = self._sh('[ -e "$1" ]', [path])
        return result.ok

    def size(self, path: str) -> int:
        result = self._sh(_SIZE, [path])
        if not result.ok:
            raise self._fail(f"reading the size of {path}", result)
        return int(result.out.strip() or "0")

    def read_from(self, path: str, offset: int) -> bytes:
        result = self._sh(_READ_FROM, [path, str(offset)])
        if not result.ok:
            raise self._fail(f"reading {path}", result)
        return result.stdout

    def write_atomic(self, path: str, data: bytes) -> None:
        result = self._sh(_WRITE_ATOMIC, [path], stdin=data)
        if not result.ok:
            raise self._fail(f"writing {path}", result)

    def copy_atomic(self, src: str, dst: str) -> None:
        result = self._sh(_COPY_ATOMIC, [src, dst])
        if not result.ok:
            raise self._fail(f"copying {src} to {dst}", result)

    def backup_once(self, src: str, backup: str) -> bool:
        """Copy `src` to `backup` unless `backup` exists. True if it was created now."""
        result = self._sh(_BACKUP_ONCE, [src, backup])
        if not result.ok:
            raise self._fail(f"backing up {src} to {backup}", result)
        return result.out.strip() == "created"

    def remove(self, path: str) -> None:
        result = self._sh(_REMOVE, [path])
        if not result.ok:
            raise self._fail(f"removing {path}", result)

    def keep_original(self, path: str) -> str:
        """Back a companion file up once (or mark it absent); "created", "absent" or "kept"."""
        backup, absent = companion_backup(path)
        result = self._sh(_KEEP_ORIGINAL, [path, backup, absent])
        if not result.ok:
            raise self._fail(f"backing up {path}", result)
        return result.out.strip()

    def put_back(self, path: str) -> str:
        """Undo `keep_original`: "restored", "removed" or "untouched" (nothing was kept)."""
        backup, absent = companion_backup(path)
        result = self._sh(_PUT_BACK, [path, backup, absent])
        if not result.ok:
            raise self._fail(f"restoring {path}", result)
        return result.out.strip()

    def forget_original(self, path: str) -> None:
        backup, absent = companion_backup(path)
        for p in (backup, absent):
            self.remove(p)

    def check_dir_writable(self, path: str) -> None:
        """DeployError unless a file could be created next to `path` (creates nothing)."""
        result = self._sh(_WRITABLE_DIR, [path])
        if not result.ok:
            raise self._fail(f"checking the directory of {path}", result)
