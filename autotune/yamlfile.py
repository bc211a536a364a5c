"""Every YAML file autotune reads (config, search space) goes through `load`.

PyYAML keeps the last of two equal keys and drops the first without a word: after a
paste, a second `benchmark:` block would silently replace the first for a whole night.
Here a duplicate key is one ConfigError naming the key and both lines, and a syntax
error names its line and column.
"""

from __future__ import annotations

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
