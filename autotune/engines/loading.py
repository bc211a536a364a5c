"""How long a server takes from its start to ready, before one start was measured.

The model's bytes at the engine's load rate, plus the process's own start: what `init` and
`validate` turn into a duration so that the night's estimate is one figure. Each rate is a
measurement, named where it is set; once a trial has run, the study's own load time
replaces this (`search/estimate.py`).
"""

from __future__ import annotations

import re
from pathlib import Path

from autotune.unit import unitfile

#: File names that hold a model's weights in a model folder.
_WEIGHTS = ("*.safetensors", "*.bin", "*.gguf", "*.pt")


def flag_value(argv: list[str], *names: str) -> str | None:
    """The value of the last of `names` on a command line: `--flag V` or `--flag=V` as
    `unitfile.split_flags` reads them, or a short `-m V`."""
    found = None
    for name, _, _, _, value in unitfile.split_flags(argv):
        if name in names:
            found = value
    for i, word in enumerate(argv[:-1]):
        if word in names and not word.startswith("--"):
            found = argv[i + 1]
    return found


def positive(value: str | None) -> float | None:
    """A flag's value as a number above 0; None for none or nonsense (the server itself
    refuses a bad flag when it starts, with its own line)."""
    try:
        number = float(value) if value is not None else None
    except ValueError:
        return None
    return number if number is not None and number > 0 else None


def model_bytes(path: str | None) -> int | None:
    """The size of a model file, or of the weights in a model folder; None when it is not
    on this machine (a remote host's, or a hub name)."""
    if not path:
        return None
    p = Path(path).expanduser()
    try:
        if p.is_file():
            return p.stat().st_size
        if p.is_dir():
            sizes = [f.stat().st_size for pattern in _WEIGHTS for f in p.rglob(pattern)]
            return sum(sizes) or None
    except OSError:
        return None
    return None


def bytes_from_name(name: str | None, bytes_per_parameter: float = 2.0) -> float | None:
    """A hub model's size from the parameter count in its name (`Qwen3.5-122B-A10B`: 122
    billion), at BF16's two bytes per parameter unless told otherwise; None without one."""
    if not name:
        return None
    found = re.search(r"(?:^|[-_/])(\d+(?:\.\d+)?)[Bb](?:$|[-_.])", name)
    if found is None:
        return None
    return float(found.group(1)) * 1e9 * bytes_per_parameter
