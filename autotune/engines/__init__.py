"""Engine adapters: one per inference server, behind `autotune.engines.base.Engine`."""

from __future__ import annotations

from autotune.engines.base import Engine, Failure, ServerInfo
from autotune.errors import ConfigError

__all__ = ["ENGINES", "Engine", "Failure", "ServerInfo", "get_engine"]

#: Engine names accepted in `target.engine`.
ENGINES = ("sglang",)


def get_engine(name: str) -> Engine:
    """The adapter for `name` (case-insensitive); ConfigError for an unknown engine."""
    key = name.strip().lower()
    if key == "sglang":
        from autotune.engines.sglang import SGLangEngine

        return SGLangEngine()
    known = ", ".join(ENGINES)
    raise ConfigError(None, "target.engine", f"unknown engine {name!r} (known: {known})")
