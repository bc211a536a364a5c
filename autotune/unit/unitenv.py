"""Set or remove variables of a unit's `Environment=`, leaving every other byte alone.

The same discipline as `unitfile.patch_unit` for ExecStart=: a variable already
assigned keeps its place and spelling and only its value changes (not at all if
it is the same); a new one gets its own `Environment=` line after the last one
of `[Service]` (or before `ExecStart=` when there is none), with that line's
line end; a removed one takes its word, and its line when nothing else is left
on it. systemd's rules: a later assignment of a name wins, an empty
`Environment=` resets the list, `%` is a specifier (`%%` a literal `%`) and `$`
is not expanded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from autotune.errors import ConfigError
from autotune.unit import unitfile, words


@dataclass(frozen=True)
class _Assignment:
    name: str
    word: words.Word
    entry: unitfile.Entry
    words_on_entry: int


def effective(text: str, *, source: str | None = None) -> dict[str, str]:
    """The variables `Environment=` of [Service] gives the server (later wins, empty resets)."""
    env: dict[str, str] = {}
    for entry in _service_env_entries(text):
        if not entry.value:
            env = {}
            continue
        values = unitfile.parse_environment(entry.value, source=source, line=entry.line)
        # `%%` is a literal `%`; autotune writes no other specifier.
        env.update({k: words.literal(v, env_expand=False) for k, v in values.items()})
    return env


def patch_environment(
    text: str,
    set_vars: Mapping[str, str],
    remove: Iterable[str] = (),
    *,
    source: str | None = None,
) -> str:
    """`text` with the variables of `set_vars` set and those of `remove` unset."""
    remove = list(remove)
    for name in [*set_vars, *remove]:
        if not unitfile.ENV_NAME.match(name):
            raise ConfigError(source, "Environment", f"{name!r} is not a variable name")
    for name in remove:
        # Every effective assignment goes, or an earlier one would take over.
        while True:
            found = _assignments(text, source).get(name)
            if not found:
                break
            text = _remove(text, found[-1])
    for name, value in set_vars.items():
        word = words.quote_word(f"{name}={value}", env_expand=False)
        found = _assignments(text, source).get(name)
        if found:
            last = found[-1]
            if words.literal(last.word.value, env_expand=False) != f"{name}={value}":
                text = text[: last.word.start] + word + text[last.word.end :]
        else:
            text = _insert(text, word, source)
    got = effective(text, source=source)
    wrong = {n: got.get(n) for n, v in set_vars.items() if got.get(n) != v}
    wrong.update({n: got[n] for n in remove if n in got})
    if wrong:
        raise RuntimeError(f"patching Environment= went wrong for {wrong}: please report this bug")
    return text


def _service_env_entries(text: str) -> list[unitfile.Entry]:
    return [e for e in unitfile.entries(text) if e.section == "Service" and e.key == "Environment"]


def _assignments(text: str, source: str | None) -> dict[str, list[_Assignment]]:
    """Effective assignments per variable, in file order."""
    out: dict[str, list[_Assignment]] = {}
    for entry in _service_env_entries(text):
        if not entry.value:
            out = {}
            continue
        split = words.split_words(
            entry.value, entry.offsets, text, (source, "Environment", entry.line)
        )
        for w in split:
            name, sep, _ = w.value.partition("=")
            if sep and unitfile.ENV_NAME.match(name):
                out.setdefault(name, []).append(_Assignment(name, w, entry, len(split)))
    return out


def _remove(text: str, a: _Assignment) -> str:
    if a.words_on_entry == 1:
        lines = unitfile._physical_lines(text)
        last = unitfile._line_index(lines, a.entry.end - 1 if a.entry.end > a.entry.start else 0)
        return text[: a.entry.start] + text[lines[last].next :]
    start, end = a.word.start, a.word.end
    # Take the whitespace before the word (or after it, for the first word).
    while start > 0 and text[start - 1] in " \t":
        start -= 1
    if text[start - 1] == "=":
        while end < len(text) and text[end] in " \t":
            end += 1
    return text[:start] + text[end:]


def _insert(text: str, word: str, source: str | None) -> str:
    lines = unitfile._physical_lines(text)
    entries = _service_env_entries(text)
    if entries:
        anchor = entries[-1]
        index = unitfile._line_index(lines, max(anchor.end - 1, anchor.start))
        eol = unitfile._line_eol(text, lines, index)
        at = lines[index].next
        if lines[index].eol_len == 0:
            return text + eol + f"Environment={word}"
        return text[:at] + f"Environment={word}{eol}" + text[at:]
    exec_start = unitfile.parse_exec_start(text, source=source)
    index = unitfile._line_index(lines, exec_start.start)
    eol = unitfile._line_eol(text, lines, index)
    at = lines[index].start
    return text[:at] + f"Environment={word}{eol}" + text[at:]
