"""Small readers shared by the engine adapters: numbers from JSON, exit codes, short reasons."""

from __future__ import annotations

import math
import re
import signal
from typing import Any

#: A failure reason is one line in `status` and the dashboard: longer ones are cut.
REASON_MAX = 300


def opt_int(value: Any) -> int | None:
    """An integer from a JSON value, or None (booleans and non-numbers too)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def describe_exit(code: int) -> str:
    """`killed by SIGKILL (exit code 137)` for 128 + N, as a shell reports a signal death."""
    if 128 < code < 128 + 65:
        try:
            return f"killed by {signal.Signals(code - 128).name} (exit code {code})"
        except ValueError:
            pass
    return f"exited with code {code}"


def clip(text: str) -> str:
    text = text.strip()
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


_OPTION = re.compile(r"(?<![\w-])--[A-Za-z0-9][\w-]*")


def argparse_flags(help_text: str) -> set[str]:
    """Every long option an argparse `--help` names. Its usage lines list each option the
    parser has (also those a grouped help, as vLLM's, leaves out of the body), so a flag
    missing here is one the program would refuse."""
    return set(_OPTION.findall(help_text))


_SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{[^}]*\})? ([-+0-9.eE]+|nan|inf)\s*$", re.MULTILINE)


def prometheus(text: str, prefix: str) -> dict[str, float]:
    """Prometheus text -> {name: value} for the series starting with `prefix`, the label sets
    of one name summed, non-finite values skipped."""
    out: dict[str, float] = {}
    for m in _SAMPLE.finditer(text):
        name = m.group(1)
        if not name.startswith(prefix):
            continue
        value = float(m.group(2))
        if math.isfinite(value):
            out[name] = out.get(name, 0.0) + value
    return out


_LABELLED = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{([^}]*)\})? ([-+0-9.eE]+|nan|inf|NaN)\s*$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of metric `name` in Prometheus text: (labels, value)."""
    out = []
    for line in text.splitlines():
        m = _LABELLED.match(line)
        if m and m.group(1) == name:
            labels = dict(_LABEL.findall(m.group(2) or ""))
            out.append((labels, float(m.group(3))))
    return out


def per_position(text: str, name: str) -> tuple[float, ...] | None:
    """A counter labelled `position="i"` (accepted draft tokens per position, vLLM and
    llama.cpp) as a tuple by position; None when the server exports none."""
    by_pos: dict[int, float] = {}
    for labels, value in metric_samples(text, name):
        pos = opt_int(labels.get("position"))
        if pos is not None:
            by_pos[pos] = by_pos.get(pos, 0.0) + value
    if not by_pos:
        return None
    return tuple(by_pos.get(i, 0.0) for i in range(max(by_pos) + 1))
