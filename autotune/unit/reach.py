"""Whether the flags autotune writes reach the server.

autotune patches the words of ExecStart=. Between those words and the server's
argument parser there can be a shell (`bash -c '...'`), a wrapper script, an
`EnvironmentFile=` that the command expands, or a parser that reads an
abbreviation. Any of them can leave a tuned flag on the command line and the
server running something else: every trial then measures the same server, and
the study would record the unit's own config again and again.

Two checks, both ending in one line that names the flag:
- before anything is deployed (`validate`, `start`): an ExecStart= that runs a
  shell with `-c`, or that holds a tuned flag inside one quoted word;
- after each deploy: what the trial asked for against what the server reports
  running, after the space's rules and the engine's own documented adjustments.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: Programs that run their `-c` argument as a command line of their own.
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})


@dataclass(frozen=True)
class Unreached:
    """A tuned value the server does not run."""

    name: str
    flag: str
    asked: Any
    running: Any

    def line(self) -> str:
        return (
            f"{self.flag} asked {self.asked}, the server runs {self.running}: the flag did not "
            "reach the server (a shell or wrapper script in ExecStart=, an EnvironmentFile= "
            "overriding it, or an abbreviated flag?). Put the server's command line in "
            "ExecStart= itself"
        )


def hidden_flags(argv: list[str], flags: Iterable[str]) -> str | None:
    """Why the tuned `flags` could not reach the server through this ExecStart= argv (None: they
    can): a shell running a `-c` command, or a flag inside a word with spaces."""
    wanted = sorted(set(flags))
    shell = _shell_command(argv)
    if shell is not None:
        program, command = shell
        inside = [f for f in wanted if f in _tokens(command)]
        where = f" (it holds {', '.join(inside)})" if inside else ""
        return (
            f"runs {program} -c '…'{where}: autotune patches ExecStart='s own words, and a flag "
            f"added after the quoted command becomes an argument of {program}, not of the "
            "server. Put the server's command in ExecStart= directly (systemd expands "
            "$VARIABLES itself; use Environment= for the rest)"
        )
    for word in argv[1:]:
        if not any(c.isspace() for c in word):
            continue
        inside = [f for f in wanted if f in _tokens(word)]
        if inside:
            return (
                f"has {', '.join(inside)} inside the quoted word {_short(word)!r}: the server "
                "gets it as one argument and autotune cannot patch it. Unquote it"
            )
    return None


def unreached(
    asked: Mapping[str, Any], running: Mapping[str, Any], flags: Mapping[str, str]
) -> list[Unreached]:
    """The values of `asked` that the server reports differently in `running` (names it does
    not report are not compared). `flags` maps each name to its launch flag."""
    out = []
    for name, want in asked.items():
        if name not in running or (running[name] is None and want is None):
            continue
        got = running[name]
        if not same(want, got):
            out.append(Unreached(name, flags.get(name, name), want, got))
    return out


def same(a: Any, b: Any) -> bool:
    """Equal as the server means it: 3 == 3.0 == "3", "EAGLE" == "eagle"; True == "true";
    two JSON objects with the same fields, each the same, whatever their spacing and order."""
    if a == b:
        return True
    if a is None or b is None:
        return False
    objects = _json_object(a), _json_object(b)
    if objects[0] is not None and objects[1] is not None:
        x, y = objects
        return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    for cast in (float, _bool):
        try:
            return cast(a) == cast(b)
        except (TypeError, ValueError):
            continue
    return str(a).strip().lower() == str(b).strip().lower()


def reached(written: Any, running: Any) -> bool:
    """Whether a flag's value as autotune wrote it is what the server runs: `same`, except
    that a JSON object counts as reached when every field written is in the server's with
    the same value (the unit's own fields, such as a draft model's path, stay beside them)."""
    objects = _json_object(written), _json_object(running)
    if objects[0] is not None and objects[1] is not None:
        x, y = objects
        return all(k in y and same(v, y[k]) for k, v in x.items())
    return same(written, running)


def _json_object(v: Any) -> dict[str, Any] | None:
    if isinstance(v, dict):
        return v
    if not isinstance(v, str) or not v.lstrip().startswith("{"):
        return None
    try:
        obj = json.loads(v)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    text = str(v).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(v)


def _shell_command(argv: list[str]) -> tuple[str, str] | None:
    """(shell, command) when argv runs a shell's `-c` command, else None."""
    words = list(argv)
    while words and _base(words[0]) == "env":
        # `env [-i] [NAME=value ...] bash -c ...`
        words = words[1:]
        while words and (words[0].startswith("-") or "=" in words[0]):
            words = words[1:]
    if not words or _base(words[0]) not in SHELLS:
        return None
    program = _base(words[0])
    rest = words[1:]
    if program == "busybox" and rest and rest[0] in SHELLS:
        program, rest = rest[0], rest[1:]
    for i, word in enumerate(rest):
        if not word.startswith("-"):
            return None  # a script file: its own arguments follow
        if word.startswith("--"):
            continue  # --login, --norc, ...
        if "c" in word[1:] and i + 1 < len(rest):
            return program, rest[i + 1]
    return None


def _base(word: str) -> str:
    return word.rsplit("/", 1)[-1].lstrip("-@:+!")


def _tokens(command: str) -> set[str]:
    try:
        words = shlex.split(command, comments=False)
    except ValueError:
        words = command.split()
    return {w.split("=", 1)[0] for w in words}


def _short(word: str, limit: int = 60) -> str:
    return word if len(word) <= limit else word[: limit - 1] + "…"
