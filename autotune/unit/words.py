"""The words of a unit's command line as systemd splits them (`extract_first_word` with
UNQUOTE | CUNESCAPE | CUNESCAPE_RELAX), and a value spelled as one word systemd hands on
unchanged."""

from __future__ import annotations

import re
from dataclasses import dataclass

from autotune.errors import ConfigError

WHITESPACE = " \t\n\r"
_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "s": " ",
}


@dataclass(frozen=True)
class Word:
    """One word of a command line."""

    raw: str
    """As written in the file, quotes and escapes included."""
    value: str
    """Quotes removed and C escapes decoded; specifiers and $VARIABLES not expanded yet."""
    start: int
    end: int
    """Span of `raw` in the unit text."""


def _cunescape_one(s: str, i: int) -> tuple[str, int] | None:
    """Decode the escape whose letter is at s[i]; return (text, chars consumed) or None."""
    c = s[i]
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c], 1
    digits = {"x": 2, "u": 4, "U": 8}.get(c)
    if digits is not None:
        hexpart = s[i + 1 : i + 1 + digits]
        if len(hexpart) == digits and all(h in "0123456789abcdefABCDEF" for h in hexpart):
            code = int(hexpart, 16)
            if code == 0 or code > 0x10FFFF:
                return None
            return chr(code), 1 + digits
        return None
    if c in "01234567":
        octal = s[i : i + 3]
        if len(octal) == 3 and all(o in "01234567" for o in octal):
            code = int(octal, 8)
            return (chr(code), 3) if code else None
    return None


def split_words(
    value: str, offsets: tuple[int, ...], text: str, where: tuple[str | None, str, int]
) -> list[Word]:
    """systemd's extract_first_word(UNQUOTE | CUNESCAPE | CUNESCAPE_RELAX), applied repeatedly."""
    words: list[Word] = []
    i, n = 0, len(value)
    while True:
        while i < n and value[i] in WHITESPACE:
            i += 1
        if i >= n:
            return words
        start = i
        out: list[str] = []
        quote = ""
        while i < n:
            c = value[i]
            if c == "\\":
                if i + 1 >= n:
                    out.append("\\")
                    i += 1
                    continue
                decoded = _cunescape_one(value, i + 1)
                if decoded is None:
                    out.append("\\" + value[i + 1])  # unknown escape: kept, as systemd does
                    i += 2
                else:
                    out.append(decoded[0])
                    i += 1 + decoded[1]
            elif quote:
                if c == quote:
                    quote = ""
                else:
                    out.append(c)
                i += 1
            elif c in "\"'":
                quote = c
                i += 1
            elif c in WHITESPACE:
                break
            else:
                out.append(c)
                i += 1
        if quote:
            source, key, line = where
            raise ConfigError(source, key, f"line {line}: unbalanced quote ({quote}) in the value")
        begin, end = offsets[start], offsets[i - 1] + 1
        words.append(Word(raw=text[begin:end], value="".join(out), start=begin, end=end))


def literal(value: str, env_expand: bool = True) -> str:
    """A word as the program receives it when it holds no specifier or variable."""
    pattern = r"%%|\$\$" if env_expand else r"%%"
    return re.sub(pattern, lambda m: m.group(0)[0], value)


def quote_word(value: str, *, env_expand: bool = True) -> str:
    """Spell `value` as one ExecStart= word that systemd hands to the program unchanged."""
    escaped = value.replace("%", "%%")
    if env_expand:
        escaped = escaped.replace("$", "$$")
    if value == ";":
        return "\\;"  # a bare ';' (even quoted) would separate two commands
    needs_quotes = not value or any(
        c in WHITESPACE or c in "\"'\\" or ord(c) < 32 or ord(c) == 127 for c in value
    )
    if not needs_quotes:
        return escaped
    plain = "'" not in value and "\\" not in value and all(31 < ord(c) != 127 for c in value)
    if value.startswith(("{", "[")) and '"' in value and plain:
        # JSON as people write it in a unit: '{"method": "ngram"}'. Inside single quotes
        # systemd still decodes escapes, so only a value without backslashes goes this way.
        return "'" + escaped + "'"
    out = []
    for c in escaped:
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif ord(c) < 32 or ord(c) == 127:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'
