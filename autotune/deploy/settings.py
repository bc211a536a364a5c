"""Build the deploy settings dataclasses from the YAML mappings, with errors that name the key.

The config loader keeps `target.ssh`, `target.gpu_wait` and `target.systemd`
as plain mappings; these functions turn them into the frozen settings and
raise `ConfigError("<file>", "target.ssh.port", ...)` for a bad value.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from autotune.deploy.gpu_wait import GpuWaitSettings
from autotune.deploy.ssh_runner import SSHSettings
from autotune.deploy.systemd import SystemdSettings
from autotune.errors import ConfigError

T = TypeVar("T")


def _accepts(annotation: Any, value: Any) -> bool:
    """A YAML value fits a field type (int fits float; bool never fits int)."""
    if annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(arg, value) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is str:
        return isinstance(value, str)
    if origin is tuple:
        # YAML lists arrive as lists; the dataclass keeps a tuple.
        return isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
    return False


def _type_name(annotation: Any) -> str:
    text = str(annotation).replace("typing.", "").replace("NoneType", "null")
    return text.replace("<class '", "").replace("'>", "")


def from_mapping(
    cls: type[T],
    raw: Mapping[str, Any] | None,
    *,
    file: str | None,
    key: str,
    fixed: Mapping[str, Any] | None = None,
) -> T:
    """`cls(**raw, **fixed)` with every key and type checked; ConfigError names `key.<field>`."""
    raw = dict(raw or {})
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    allowed = [n for n in names if n not in (fixed or {})]
    for name, value in raw.items():
        if name not in allowed:
            raise ConfigError(file, f"{key}.{name}", f"unknown key; expected one of {allowed}")
        if not _accepts(hints[name], value):
            raise ConfigError(
                file, f"{key}.{name}", f"must be {_type_name(hints[name])}, got {value!r}"
            )
        if isinstance(value, list):
            raw[name] = tuple(value)
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if f.init
        and f.name not in raw
        and f.name not in (fixed or {})
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(file, f"{key}.{missing[0]}", "is required")
    try:
        return cls(**raw, **(fixed or {}))
    except ValueError as exc:
        raise ConfigError(file, key, str(exc)) from exc


def ssh_settings(raw: Mapping[str, Any] | None, file: str | None = None) -> SSHSettings:
    return from_mapping(SSHSettings, raw, file=file, key="target.ssh")


def gpu_wait_settings(
    raw: Mapping[str, Any] | bool | None, file: str | None = None
) -> GpuWaitSettings | None:
    """None (no wait) unless `target.gpu_wait` is given; `true` or `{}` means the defaults."""
    if raw is None or raw is False:
        return None
    return from_mapping(
        GpuWaitSettings, {} if raw is True else raw, file=file, key="target.gpu_wait"
    )


def systemd_settings(
    unit: str,
    unit_file: str | None,
    raw: Mapping[str, Any] | None,
    file: str | None = None,
    companion_files: Sequence[str] = (),
) -> SystemdSettings:
    """`target.unit`, `target.unit_file` and the optional `target.systemd` mapping;
    `companion_files` are the search space's files beside the unit."""
    fixed: dict[str, Any] = {
        "unit": unit,
        "unit_file": unit_file,
        "companion_files": tuple(companion_files),
    }
    return from_mapping(SystemdSettings, raw, file=file, key="target.systemd", fixed=fixed)
