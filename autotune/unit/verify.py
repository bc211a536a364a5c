"""`systemd-analyze verify` on a patched unit, offline: what systemd would say of it before
it is deployed, with the noise of the machine autotune runs on filtered out."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from autotune.errors import ConfigError

_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.service$")
_UNIT_SUBJECT = re.compile(r"^(\S+?\.(?:service|socket|target|timer|mount|path|slice|scope)):")


def verify_unit(text: str, unit_name: str, *, check_executables: bool = True) -> list[str]:
    """Problems `systemd-analyze verify` finds in `text`, one line each; [] if none.

    Runs offline on a copy in a temporary directory, so nothing on the system
    changes. Every stderr line counts as a problem, except lines about other
    units: a dependency that is not installed on this machine (`Unit X not
    found`) or another unit file's own problems. `check_executables=False` also
    drops `Command ... is not executable`, for a unit that will run on another
    host. Returns [] when systemd-analyze is not installed.
    """
    if not _UNIT_NAME.match(unit_name):
        raise ConfigError(None, "unit", f"{unit_name!r} is not a service unit name (NAME.service)")
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return []
    with tempfile.TemporaryDirectory(prefix="autotune-verify-") as tmp:
        path = Path(tmp) / unit_name
        path.write_bytes(text.encode())  # bytes, so CRLF reaches systemd as written
        env = {**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": "", "LC_ALL": "C"}
        proc = subprocess.run(
            [analyze, "verify", "--man=no", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
        return _filter_verify(proc.stderr, str(path), unit_name, check_executables)


def _filter_verify(stderr: str, path: str, unit_name: str, check_executables: bool) -> list[str]:
    problems: list[str] = []
    for line in stderr.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith(path + ":"):
            problems.append(unit_name + line[len(path) :])
            continue
        subject = _UNIT_SUBJECT.match(line)
        if subject and subject.group(1) != unit_name:
            continue  # another unit file's problem
        if line.startswith("/") and re.match(r"^/\S+:\d+:", line):
            continue  # another unit file, named by its path
        other = re.search(r"Unit (\S+) (?:not found|has a bad unit file setting)", line)
        if other and other.group(1) != unit_name:
            continue  # a dependency missing here; the target host may have it
        if not check_executables and re.search(r"Command \S+ is not executable", line):
            continue
        problems.append(line)
    return problems
