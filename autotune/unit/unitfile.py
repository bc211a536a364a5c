"""Read and patch the `ExecStart=` of a user's systemd unit, leaving every other byte alone.

The user's unit file is the source of truth: autotune rewrites only the words
of the tuned flags inside the one effective `ExecStart=` of `[Service]`, so a
diff of the patched unit against the original shows nothing but those flags.

Parsing follows systemd 252 (`conf-parser.c`, `config_parse_exec`,
`extract_first_word`), because the question is always "what will systemd run":

- A line ending in an odd number of backslashes continues on the next line;
  the backslash becomes a space. Comment lines (`#`, `;`) inside a continuation
  are skipped; an empty line ends it.
- Line ends may be LF, CRLF or CR, as systemd accepts all three. Lines that
  autotune inserts use the line end of the line they follow, so a CRLF file
  stays CRLF.
- Words are split on whitespace; double and single quotes may open anywhere in
  a word; C escapes (`\\n`, `\\x41`, `\\"`, ...) are decoded inside and outside
  quotes; unknown escapes are kept as written (systemd warns and does the same).
- The first word may carry the prefixes `-`, `@`, `:`, `+`, `!`, `!!`.
- `%` starts a specifier (`%%` is a literal `%`); `$NAME`, `${NAME}` are
  expanded from the environment at exec time (`$$` is a literal `$`). Values
  that autotune writes are escaped for both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from autotune.errors import ConfigError
from autotune.unit.words import WHITESPACE, Word, literal, quote_word, split_words

__all__ = [
    "ExecStart",
    "Word",
    "entries",
    "expand_argv",
    "expand_specifiers",
    "flags",
    "parse_environment",
    "parse_environment_file",
    "parse_exec_start",
    "patch_unit",
    "quote_word",
    "service_values",
]

_EOL = re.compile(r"\r\n|\r|\n")
_PREFIX_CHARS = "-@:+!"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --------------------------------------------------------------------------- lines


@dataclass(frozen=True)
class _Line:
    start: int
    end: int  # end of the content, before the line end
    next: int  # start of the following line

    @property
    def eol_len(self) -> int:
        return self.next - self.end


def _physical_lines(text: str) -> list[_Line]:
    lines: list[_Line] = []
    pos = 0
    for match in _EOL.finditer(text):
        lines.append(_Line(pos, match.start(), match.end()))
        pos = match.end()
    if pos < len(text):
        lines.append(_Line(pos, len(text), len(text)))
    return lines


def _ends_in_continuation(content: str) -> bool:
    # An odd run of trailing backslashes continues the line; `\\` is an escaped backslash.
    run = len(content) - len(content.rstrip("\\"))
    return run % 2 == 1


def _is_comment(content: str) -> bool:
    stripped = content.lstrip(WHITESPACE)
    return bool(stripped) and stripped[0] in "#;"


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True)
class Entry:
    """One `Key=value` assignment as systemd reads it (continuations joined)."""

    section: str
    key: str
    value: str
    """The value with continuations joined and outer whitespace stripped."""
    line: int
    """1-based number of the line holding the key."""
    start: int
    """Offset of the first character of the key line."""
    end: int
    """Offset just past the content of the assignment's last physical line."""
    offsets: tuple[int, ...]
    """Offset in the text of each character of `value` (a joined backslash maps to itself)."""


def entries(text: str) -> list[Entry]:
    """Every assignment of the unit, in file order, with its section."""
    return _parse(text)[0]


def _parse(text: str) -> tuple[list[Entry], set[str]]:
    """(assignments, names of the sections present)."""
    lines = _physical_lines(text)
    result: list[Entry] = []
    sections: set[str] = set()
    section = ""
    chars: list[str] = []
    offsets: list[int] = []
    first_line = -1

    def flush(last: _Line) -> None:
        nonlocal section
        logical = "".join(chars)
        lead = len(logical) - len(logical.lstrip(WHITESPACE))
        body = logical.strip(WHITESPACE)
        if not body:
            return
        if body.startswith("["):
            if body.endswith("]"):
                section = body[1:-1]
                sections.add(section)
            return
        eq = body.find("=")
        if eq < 0:
            return  # systemd ignores a line without '=' (with a warning)
        key = body[:eq].strip(WHITESPACE)
        raw_value = body[eq + 1 :]
        value_lead = len(raw_value) - len(raw_value.lstrip(WHITESPACE))
        value = raw_value.strip(WHITESPACE)
        first = lead + eq + 1 + value_lead
        if section:
            result.append(
                Entry(
                    section=section,
                    key=key,
                    value=value,
                    line=first_line + 1,
                    start=lines[first_line].start,
                    end=last.end,
                    offsets=tuple(offsets[first : first + len(value)]),
                )
            )

    in_continuation = False
    for index, line in enumerate(lines):
        content = text[line.start : line.end]
        if index == 0 and content.startswith("\ufeff"):
            content = content[1:]
            base = line.start + 1
        else:
            base = line.start
        if _is_comment(content):
            continue
        if not in_continuation:
            chars, offsets, first_line = [], [], index
        continued = _ends_in_continuation(content)
        body = content[:-1] if continued else content
        chars.extend(body)
        offsets.extend(range(base, base + len(body)))
        if continued:
            chars.append(" ")
            offsets.append(base + len(body))
            in_continuation = True
            continue
        in_continuation = False
        flush(line)
    if in_continuation:
        flush(lines[-1])
    return result, sections


def service_values(text: str, key: str) -> list[str]:
    """Values of every `key=` in `[Service]`, in order, after the last empty (resetting) one."""
    values: list[str] = []
    for entry in entries(text):
        if entry.section == "Service" and entry.key == key:
            if entry.value:
                values.append(entry.value)
            else:
                values = []
    return values


# --------------------------------------------------------------------------- ExecStart


@dataclass(frozen=True)
class ExecStart:
    """The effective `ExecStart=` of `[Service]`."""

    prefix: str
    """Special executable prefixes as written (`-`, `@`, `:`, `+`, `!`, `!!`), possibly ''."""
    words: tuple[Word, ...]
    """Every word; the first one's `value` has the prefix removed (its `raw` keeps it)."""
    line: int
    """1-based line of `ExecStart=`."""
    start: int
    end: int
    """Span of the whole assignment, from the key line's start to the end of its last line."""
    multiline: bool
    """True if the assignment spans several lines (continuations)."""
    source: str | None = None

    @property
    def argv(self) -> list[str]:
        """The words as the program receives them, with specifiers and variables left unexpanded.

        `%%` and `$$` are shown as `%` and `$`, so a value that autotune wrote
        reads back exactly as given.
        """
        return [literal(w.value, self.env_expand) for w in self.words]

    @property
    def env_expand(self) -> bool:
        """False when the `:` prefix turns off `$VARIABLE` expansion."""
        return ":" not in self.prefix

    def flags(self) -> dict[str, str | None]:
        """`flags(self.argv)`, with errors that name the unit file and line."""
        return {name: occ.value for name, occ in _occurrences(self).items()}


def parse_exec_start(text: str, *, source: str | None = None) -> ExecStart:
    """Find the single effective `ExecStart=` of `[Service]` and split it into words.

    `source` names the file in error messages. An empty `ExecStart=` resets the
    list (as in a drop-in override). Several effective `ExecStart=` lines are an
    error unless `Type=oneshot`; for a oneshot unit the last one is returned.
    """
    all_entries, sections = _parse(text)
    service = [e for e in all_entries if e.section == "Service"]
    if "Service" not in sections:
        raise ConfigError(source, "[Service]", "the unit has no [Service] section")
    execs: list[Entry] = []
    service_type = "simple"
    for entry in service:
        if entry.key == "ExecStart":
            execs = [*execs, entry] if entry.value else []
        elif entry.key == "Type":
            service_type = entry.value or "simple"
    if not execs:
        raise ConfigError(source, "ExecStart", "no ExecStart= in [Service]")
    if len(execs) > 1 and service_type != "oneshot":
        lines = ", ".join(str(e.line) for e in execs)
        raise ConfigError(
            source,
            "ExecStart",
            f"{len(execs)} ExecStart= lines (lines {lines}) with Type={service_type}; "
            "only Type=oneshot may have several (a drop-in must reset it with an empty ExecStart=)",
        )
    entry = execs[-1]
    words = split_words(entry.value, entry.offsets, text, (source, "ExecStart", entry.line))
    for word in words:
        if word.raw == ";":
            raise ConfigError(
                source,
                "ExecStart",
                f"line {entry.line}: ';' starts a second command; autotune needs exactly one "
                "(write \\; for a literal semicolon)",
            )
    words = [Word(w.raw, ";", w.start, w.end) if w.raw == "\\;" else w for w in words]
    first = words[0]
    prefix_len = 0
    while prefix_len < len(first.value) and first.value[prefix_len] in _PREFIX_CHARS:
        prefix_len += 1
    prefix, executable = first.value[:prefix_len], first.value[prefix_len:]
    if not executable:
        raise ConfigError(source, "ExecStart", f"line {entry.line}: no command after the prefix")
    if "@" in prefix and len(words) < 2:
        raise ConfigError(source, "ExecStart", f"line {entry.line}: '@' needs an argv[0] word")
    words[0] = Word(first.raw, executable, first.start, first.end)
    return ExecStart(
        prefix=prefix,
        words=tuple(words),
        line=entry.line,
        start=entry.start,
        end=entry.end,
        multiline=_EOL.search(text, entry.start, entry.end) is not None,
        source=source,
    )


# --------------------------------------------------------------------------- flags


@dataclass(frozen=True)
class _Occurrence:
    flag: int  # index of the word holding the flag
    value_word: int | None  # index of the separate value word, if any
    inline: bool  # spelled --flag=value
    value: str | None


def split_flags(argv: list[str]) -> list[tuple[str, int, int | None, bool, str | None]]:
    """(name, flag index, value index, inline, value) for each `--flag` in argv, in order,
    a repeated flag each time (`flags` for one value per flag)."""
    found: list[tuple[str, int, int | None, bool, str | None]] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            break  # end of options: the rest is positional
        if not word.startswith("--"):
            i += 1
            continue
        if "=" in word:
            name, value = word.split("=", 1)
            found.append((name, i, None, True, value))
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            found.append((word, i, i + 1, False, argv[i + 1]))
            i += 2
        else:
            found.append((word, i, None, False, None))
            i += 1
    return found


def near_miss(flag: str, known: Iterable[str]) -> str | None:
    """The known flag that `flag` mistypes (one letter added, dropped, changed or swapped) or
    abbreviates as argparse allows (a prefix the server reads as that flag); None when it
    is one of them, or near none. Two letters apart is another flag (`--spec-draft-n-min`,
    `--spec-draft-n-max`)."""
    known = list(known)
    if flag in known:
        return None
    prefixed = [k for k in known if k.startswith(flag)]
    if len(prefixed) == 1:
        return prefixed[0]
    return next((k for k in known if _one_edit(flag, k)), None)


def _one_edit(a: str, b: str) -> bool:
    """`a` and `b` differ by one insertion, deletion, substitution or adjacent swap."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    i = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    if len(a) == len(b):
        swapped = a[i + 1 : i + 2] == b[i : i + 1] and a[i : i + 1] == b[i + 1 : i + 2]
        return a[i + 1 :] == b[i + 1 :] or (swapped and a[i + 2 :] == b[i + 2 :])
    longer, shorter = (a, b) if len(a) > len(b) else (b, a)
    return longer[i + 1 :] == shorter[i:]


def flags(argv: list[str], *, source: str | None = None) -> dict[str, str | None]:
    """The `--flag` options of a command line: `--flag value`, `--flag=value` or boolean `--flag`.

    A word after a flag is its value unless it starts with `--` (so `-1` is a
    value); a bare `--` ends the options. Words that are neither flags nor
    values (the executable, `-m module`) are left out. A flag given twice is
    an error: autotune could not tell which one the server uses.
    """
    result: dict[str, str | None] = {}
    for name, _flag, _value_word, _inline, value in split_flags(argv):
        if name in result:
            raise ConfigError(source, "ExecStart", f"flag {name} is given twice")
        result[name] = value
    return result


def _occurrences(exec_start: ExecStart) -> dict[str, _Occurrence]:
    argv = exec_start.argv
    result: dict[str, _Occurrence] = {}
    for name, flag, value_word, inline, value in split_flags(argv[1:]):
        flag += 1
        if name in result:
            raise ConfigError(
                exec_start.source,
                "ExecStart",
                f"line {exec_start.line}: flag {name} is given twice",
            )
        shifted = None if value_word is None else value_word + 1
        result[name] = _Occurrence(flag, shifted, inline, value)
    return result


# --------------------------------------------------------------------------- patching


def _line_index(lines: list[_Line], offset: int) -> int:
    for index, line in enumerate(lines):
        if line.start <= offset < line.next or (offset == line.next == line.end):
            return index
    return len(lines) - 1


def _replace(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def _remove_words(text: str, exec_start: ExecStart, first: int, last: int) -> str:
    """Delete words[first..last] and the whitespace before them, keeping continuations valid."""
    words = exec_start.words
    lines = _physical_lines(text)
    head_line = _line_index(lines, exec_start.start)
    li = _line_index(lines, words[first].start)
    lj = _line_index(lines, words[last].end - 1)
    before = text[lines[li].start : words[first].start]
    after = text[words[last].end : lines[lj].end]
    continued = _ends_in_continuation(text[lines[lj].start : lines[lj].end])
    alone = (
        li != head_line
        and before.strip(" \t") == ""
        and (after.strip(" \t") == "" or (continued and after[:-1].strip(" \t") == ""))
    )
    if alone:
        if continued:
            return _replace(text, lines[li].start, lines[lj].next, "")
        # The command's last line goes: the line before must stop continuing, or
        # systemd would glue whatever follows onto the command.
        prev_line = lines[_line_index(lines, words[first - 1].end - 1)]
        text = _replace(text, lines[li].start, lines[lj].next, "")
        return _replace(text, words[first - 1].end, prev_line.end, "")
    if last + 1 < len(words) and _line_index(lines, words[last + 1].start) == lj:
        return _replace(text, words[first].start, words[last + 1].start, "")
    return _replace(text, words[first - 1].end, words[last].end, "")


def _flag_text(name: str, value: str | None, inline: bool, env_expand: bool) -> str:
    if value is None:
        return quote_word(name, env_expand=env_expand)
    # A value that starts with `--` would read back as a flag: glue it with '='.
    if inline or value.startswith("--"):
        return quote_word(f"{name}={value}", env_expand=env_expand)
    return f"{quote_word(name, env_expand=env_expand)} {quote_word(value, env_expand=env_expand)}"


def _check_flag_name(name: str, source: str | None) -> None:
    if not name.startswith("--") or len(name) < 3 or "=" in name:
        raise ConfigError(source, name, "a flag must look like --name (no '=')")
    if any(c in WHITESPACE for c in name):
        raise ConfigError(source, name, "a flag name cannot contain whitespace")


def patch_unit(
    text: str,
    set_flags: Mapping[str, str | None],
    remove_flags: Iterable[str] = (),
    *,
    source: str | None = None,
) -> str:
    """Return `text` with the flags of its ExecStart= set or removed, every other byte unchanged.

    - A present flag keeps its spelling (`--flag value` or `--flag=value`) and
      its place; only its value word changes, and not at all if the value is
      already the same, so patching is idempotent.
    - A missing flag is appended after the last word: on a new continuation
      line with the indentation of the previous one if the command already
      spans several lines, else on the same line. Appended valued flags use
      `=` only if most flags of the command already do.
    - `None` means a boolean flag (no value word).
    - Removed flags go with their value; a flag alone on its line takes the line.
    """
    remove = list(remove_flags)
    for name in [*set_flags, *remove]:
        _check_flag_name(name, source)
    both = set(set_flags) & set(remove)
    if both:
        raise ValueError(f"flags both set and removed: {sorted(both)}")

    for name in remove:
        exec_start = parse_exec_start(text, source=source)
        occ = _occurrences(exec_start).get(name)
        if occ is not None:
            last = occ.value_word if occ.value_word is not None else occ.flag
            text = _remove_words(text, exec_start, occ.flag, last)

    missing: dict[str, str | None] = {}
    for name, value in set_flags.items():
        exec_start = parse_exec_start(text, source=source)
        occ = _occurrences(exec_start).get(name)
        if occ is None:
            missing[name] = value
            continue
        text = _set_present(text, exec_start, name, occ, value)

    if missing:
        text = _append(text, parse_exec_start(text, source=source), missing)
    # Patching must never produce a unit that parses differently from what was asked.
    result = parse_exec_start(text, source=source).flags()
    wrong = {n: v for n, v in set_flags.items() if result.get(n, "<absent>") != v}
    wrong.update({n: result[n] for n in remove if n in result})
    if wrong:
        raise RuntimeError(f"patching the unit went wrong for {wrong}: please report this bug")
    return text


def _set_present(
    text: str, exec_start: ExecStart, name: str, occ: _Occurrence, value: str | None
) -> str:
    words = exec_start.words
    flag_word = words[occ.flag]
    env = exec_start.env_expand
    if occ.value == value:
        return text
    if occ.inline:
        return _replace(text, flag_word.start, flag_word.end, _flag_text(name, value, True, env))
    if occ.value_word is not None:
        if value is None:
            return _remove_words(text, exec_start, occ.value_word, occ.value_word)
        value_word = words[occ.value_word]
        if value.startswith("--"):
            return _replace(
                text, flag_word.start, value_word.end, _flag_text(name, value, True, env)
            )
        return _replace(text, value_word.start, value_word.end, quote_word(value, env_expand=env))
    # A boolean flag that now takes a value.
    assert value is not None
    return _replace(text, flag_word.start, flag_word.end, _flag_text(name, value, False, env))


def _append(text: str, exec_start: ExecStart, missing: dict[str, str | None]) -> str:
    occurrences = _occurrences(exec_start).values()
    inline_votes = sum(1 for o in occurrences if o.inline)
    separate_votes = sum(1 for o in occurrences if o.value_word is not None)
    inline = inline_votes > separate_votes
    env = exec_start.env_expand
    pieces = [_flag_text(name, value, inline, env) for name, value in missing.items()]
    last = exec_start.words[-1]
    lines = _physical_lines(text)
    head = _line_index(lines, exec_start.start)
    last_line = _line_index(lines, last.end - 1)
    word_lines = sorted({_line_index(lines, w.start) for w in exec_start.words} - {head})
    if not word_lines:
        return _replace(text, last.end, last.end, "".join(" " + p for p in pieces))
    indent_source = lines[word_lines[-1]]
    content = text[indent_source.start : indent_source.end]
    indent = content[: len(content) - len(content.lstrip(" \t"))]
    eol = _line_eol(text, lines, last_line)
    insert = "".join(f" \\{eol}{indent}{p}" for p in pieces)
    return _replace(text, last.end, last.end, insert)


def _line_eol(text: str, lines: list[_Line], index: int) -> str:
    line = lines[index]
    if line.eol_len:
        return text[line.end : line.next]
    match = _EOL.search(text)
    return match.group(0) if match else "\n"


# --------------------------------------------------------------------------- environment


def parse_environment(value: str, *, source: str | None = None, line: int = 0) -> dict[str, str]:
    """The assignments of one `Environment=` value (`A=1 "B=two words"`), in order.

    Words that are not `NAME=value` are skipped, as systemd skips them.
    """
    offsets = tuple(range(len(value)))
    result: dict[str, str] = {}
    for word in split_words(value, offsets, value, (source, "Environment", line)):
        name, sep, val = word.value.partition("=")
        if sep and ENV_NAME.match(name):
            result[name] = val
    return result


def parse_environment_file(text: str) -> dict[str, str]:
    """Variables of an `EnvironmentFile=` (`NAME=value` lines, `#`/`;` comments, quotes).

    Covers what such files hold in practice: optional `export `, single quotes
    taken literally, double quotes with backslash escapes, unquoted values with
    outer whitespace trimmed, backslash-newline continuations.
    """
    result: dict[str, str] = {}
    joined = re.sub(r"\\\r?\n", "", text)
    for raw in _EOL.split(joined):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not ENV_NAME.match(name):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        elif len(value) >= 2 and value[0] == value[-1] == '"':
            value = re.sub(r'\\(["\\`$])', r"\1", value[1:-1]).replace("\\n", "\n")
        result[name] = value
    return result


def expand_argv(
    exec_start: ExecStart, env: Mapping[str, str], specifiers: Mapping[str, str]
) -> tuple[str, list[str]]:
    """(executable, argv) as systemd would exec them: specifiers, then `$VARIABLES`.

    `specifiers` maps a specifier letter (`n`, `i`, `h`, ...) to its value; an
    unknown one is an error. `$NAME` standing alone becomes zero or more words
    split on whitespace, `${NAME}` is replaced in place, `$$` is a `$`. With
    the `@` prefix the second word is argv[0].
    """
    words = [
        expand_specifiers(w.value, specifiers, source=exec_start.source, line=exec_start.line)
        for w in exec_start.words
    ]
    if exec_start.env_expand:
        expanded: list[str] = []
        for index, word in enumerate(words):
            match = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
            if match and index > 0:
                expanded.extend(env.get(match.group(1), "").split())
            else:
                expanded.append(_expand_env(word, env))
        words = expanded
    executable = words[0]
    argv = words[1:] if "@" in exec_start.prefix else words
    return executable, argv


def expand_specifiers(
    value: str,
    specifiers: Mapping[str, str],
    *,
    source: str | None = None,
    key: str = "ExecStart",
    line: int = 0,
) -> str:
    """Replace `%x` specifiers (letter -> value in `specifiers`); `%%` is `%`; others are errors."""

    def one(match: re.Match[str]) -> str:
        letter = match.group(1)
        if letter == "%":
            return "%"
        if letter in specifiers:
            return specifiers[letter]
        where = f"line {line}: " if line else ""
        raise ConfigError(source, key, f"{where}specifier %{letter} is not supported in this mode")

    return re.sub(r"%(.)", one, value, flags=re.DOTALL)


def _expand_env(word: str, env: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), "")

    return re.sub(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}", one, word)
