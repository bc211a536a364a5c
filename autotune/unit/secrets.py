"""Secrets a study must never store or print: the server's API key and the unit's others.

The key reaches autotune two ways: the variable `target.api_key_env` names, and the
unit's own command line (`--api-key KEY`, which SGLang, vLLM and llama-server all take,
or a `$VARIABLE` set by `Environment=`). SGLang 0.5.23 prints it back in plain text in its
`server_args=` log line and in `/server_info` (docs/engine-facts.md), so it can reach
every record a study keeps: the stored unit, the server's log, a trial's attributes and
autotune's own log. Each of those writers passes its text through `redact` first.

One process tunes one server: its secrets are one process-wide set, filled where the
study reads its unit and its key (`remember`, `remember_unit`) and read by every writer.

    secrets.remember(key); secrets.remember_unit(unit_text)
    secrets.text("... api_key='sk-1' ...")     # "... api_key='<redacted>' ..."
    secrets.value({"reason": "... sk-1 ..."})  # the same, through dicts and lists
    secrets.scrub_file(server_log)             # masked in place, as long as before
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, MutableMapping
from pathlib import Path
from typing import Any

from autotune.errors import ConfigError
from autotune.unit import unitenv, unitfile

MASK = "<redacted>"

#: A flag whose last word names a secret: --api-key, --admin-api-key, --hf-token (not
#: --speculative-num-draft-tokens, not --ssl-keyfile).
SECRET_FLAG = re.compile(r"^--(?:[\w-]*-)?(?:key|secret|password|passwd|token)$", re.IGNORECASE)
#: An environment variable whose name says it holds one: API_KEY, HF_TOKEN, DB_PASSWORD.
SECRET_VARIABLE = re.compile(r"(?:^|_)(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)$", re.IGNORECASE)
#: Shorter values are not worth the name, and masking them would garble every record.
MIN_LENGTH = 4

_known: set[str] = set()


def remember(*values: str | None) -> None:
    """Secrets from now on masked by `text` and `value`."""
    _known.update(v for v in values if v is not None and len(v) >= MIN_LENGTH)


def remember_unit(unit_text: str, source: str | None = None) -> None:
    """The unit's secrets: the values of its secret-looking flags (a `$VARIABLE` read from
    its `Environment=`) and of its variables whose names say they hold one."""
    remember(*in_unit(unit_text, source))


def in_unit(unit_text: str, source: str | None = None) -> set[str]:
    """The secrets a unit's text holds (a unit that does not parse holds none that autotune
    can find; the study refuses it elsewhere, naming the line)."""
    try:
        argv = unitfile.parse_exec_start(unit_text, source=source).argv
        env = unitenv.effective(unit_text, source=source)
    except ConfigError:
        return set()
    found = {v for k, v in env.items() if SECRET_VARIABLE.search(k)}
    for value in in_argv(argv):
        found.add(value)
        variable = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", value)
        if variable and variable.group(1) in env:
            found.add(env[variable.group(1)])
    return found


def in_argv(argv: Iterable[str]) -> list[str]:
    """The values of the secret-looking flags of a command line (`--api-key K`,
    `--api-key=K`)."""
    return [v for name, _, _, _, v in unitfile.split_flags(list(argv)) if _secret(name, v)]


def mask_command(command: str) -> str:
    """A command line joined by spaces (SGLang's `launch_command`) with the values of its
    secret-looking flags masked, whether autotune knows them or not."""
    words = command.split()
    for name, at, value_at, inline, value in unitfile.split_flags(words):
        if _secret(name, value):
            if inline:
                words[at] = f"{name}={MASK}"
            elif value_at is not None:
                words[value_at] = MASK
    return " ".join(words)


def flags(parsed: Mapping[str, str | None]) -> dict[str, str | None]:
    """A unit's parsed flags (`unitfile.flags`) as a record may keep them: a secret-looking
    flag's value masked whether autotune knows it or not, every other one through `value`."""
    return {k: MASK if _secret(k, v) else value(v) for k, v in parsed.items()}


def _secret(flag: str, value: str | None) -> bool:
    return bool(value) and bool(SECRET_FLAG.match(flag))


def text(s: str) -> str:
    """`s` with every remembered secret replaced by `<redacted>`."""
    for secret in _by_length():
        if secret in s:
            s = s.replace(secret, MASK)
    return s


def value(v: Any) -> Any:
    """`text` through strings, dicts (keys and values), lists and tuples; other values as
    they are."""
    if not _known:
        return v
    if isinstance(v, str):
        return text(v)
    if isinstance(v, Mapping):
        return {value(k): value(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return type(v)(value(x) for x in v)
    return v


def scrub_file(path: Path, secrets: Iterable[str] = ()) -> None:
    """Mask the secrets in a file a running server may still be writing: each occurrence is
    overwritten in place by as many `*` (nothing moves, so the writer's offset stays right)."""
    wanted = sorted({*_known, *(s for s in secrets if len(s) >= MIN_LENGTH)}, key=len)
    if not wanted:
        return
    try:
        data = path.read_bytes()
    except OSError:
        return
    spans = [
        (m.start(), len(s))
        for s in map(str.encode, reversed(wanted))
        for m in re.finditer(re.escape(s), data)
    ]
    if not spans:
        return
    fd = os.open(path, os.O_WRONLY)
    try:
        for start, length in spans:
            os.pwrite(fd, b"*" * length, start)
    finally:
        os.close(fd)


def log_processor(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> Any:
    """structlog: every field of every log line, the message included."""
    if _known:
        for key, v in event.items():
            event[key] = value(v)
    return event


def forget() -> None:
    """Tests only: start from no secret."""
    _known.clear()


def _by_length() -> list[str]:
    # The longest first: a key that contains another is masked whole.
    return sorted(_known, key=len, reverse=True)
