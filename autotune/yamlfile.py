"""Every YAML file autotune reads (config, search space) goes through `load`; a config's
mappings are read through `Section`.

PyYAML keeps the last of two equal keys and drops the first without a word: after a
paste, a second `benchmark:` block would silently replace the first for a whole night.
Here a duplicate key is one ConfigError naming the key and both lines, and a syntax
error names its line and column.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from autotune.errors import ConfigError


class _Loader(yaml.SafeLoader):
    pass


def _mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        line = key_node.start_mark.line + 1
        if isinstance(key, (str, int, float, bool)) and key in seen:
            raise _Duplicate(str(key), seen[key], line)
        seen[key] = line
    return loader.construct_mapping(node, deep=deep)


class _Duplicate(Exception):
    def __init__(self, key: str, first: int, again: int) -> None:
        self.key, self.first, self.again = key, first, again


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load(text: str, source: str) -> Any:
    """The YAML document in `text` (read from `source`); ConfigError on bad YAML."""
    try:
        return yaml.load(text, Loader=_Loader)
    except _Duplicate as dup:
        raise ConfigError(
            source,
            dup.key,
            f"appears twice (lines {dup.first} and {dup.again}): YAML would keep only the "
            "second; remove one",
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise ConfigError(source, None, f"not valid YAML: {problem}{where}") from None


def read(path: Path, what: str) -> Any:
    """The YAML file at `path`, parsed; `what` names it when it is missing ("config file")."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(str(path), None, f"{what} not found") from None
    except OSError as exc:
        raise ConfigError(str(path), None, f"cannot read: {exc.strerror}") from None
    return load(text, str(path))


class Section:
    """A mapping of a YAML file being read: typed getters that name the file and the key
    path in every refusal, and `finish` refusing the keys nobody read."""

    def __init__(self, file: str, path: str, data: Any):
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(file, path, f"must be a mapping, got {show(data)}")
        self.file, self.path, self.data = file, path, data
        self.used: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def error(self, name: str, problem: str) -> ConfigError:
        return ConfigError(self.file, self.key(name), problem)

    def get(self, name: str, default: Any = None) -> Any:
        self.used.add(name)
        return self.data.get(name, default)

    def section(self, name: str) -> Section:
        return Section(self.file, self.key(name), self.get(name))

    def str(self, name: str, default: str | None = None, choices: tuple[str, ...] = ()) -> Any:
        v = self.get(name, default)
        if v is None:
            return None
        if not isinstance(v, str) or not v.strip():
            raise self.error(name, f"must be a non-empty string, got {show(v)}")
        if choices and v not in choices:
            raise self.error(name, f"must be one of {', '.join(choices)}; got {v!r}")
        return v

    def int(self, name: str, default: int | None, minimum: int | None = None) -> Any:
        v = self.get(name, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(name, f"must be a whole number, got {show(v)}")
        if minimum is not None and v < minimum:
            raise self.error(name, f"must be at least {minimum}, got {v}")
        return v

    def number(self, name: str, default: float | None, minimum: float | None = None) -> Any:
        v = self.get(name, default)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.error(name, f"must be a number, got {show(v)}")
        if minimum is not None and v < minimum:
            raise self.error(name, f"must be at least {minimum}, got {v}")
        return float(v)

    def bool(self, name: str, default: bool) -> Any:
        v = self.get(name, default)
        if not isinstance(v, bool):
            raise self.error(name, f"must be true or false, got {show(v)}")
        return v

    def finish(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise ConfigError(self.file, self.key(str(unknown[0])), "unknown key")


def show(v: Any) -> str:
    """A value as a refusal quotes it: its type, and itself unless a mapping or a list."""
    return f"{type(v).__name__} {v!r}" if not isinstance(v, (dict, list)) else type(v).__name__
