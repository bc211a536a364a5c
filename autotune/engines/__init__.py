"""Engine adapters: one per inference server, behind `autotune.engines.base.Engine`.

    engine = get_engine("llama.cpp")        # target.engine in autotune.yaml
    info = await engine.server_info(url, ["spec_type"], api_key=None)
    info.max_running_requests               # SGLang's running-request cap; llama.cpp's slots

An engine-specific fact lives in its adapter; if shared code needs an
`if engine == ...`, the protocol lacks a method.
"""

from __future__ import annotations

from autotune.engines.base import STUDY_FAILURES, Counters, Engine, Failure, ServerInfo
from autotune.errors import ConfigError

__all__ = [
    "ENGINES",
    "STUDY_FAILURES",
    "Counters",
    "Engine",
    "Failure",
    "ServerInfo",
    "get_engine",
]

#: Engine names accepted in `target.engine`.
ENGINES = ("sglang", "llama.cpp")


def get_engine(name: str) -> Engine:
    """The adapter for `name` (case-insensitive); ConfigError for an unknown engine."""
    key = name.strip().lower()
    if key == "sglang":
        from autotune.engines.sglang import SGLangEngine

        return SGLangEngine()
    if key in ("llama.cpp", "llamacpp", "llama-cpp"):
        from autotune.engines.llamacpp import LlamaCppEngine

        return LlamaCppEngine()
    known = ", ".join(ENGINES)
    raise ConfigError(None, "target.engine", f"unknown engine {name!r} (known: {known})")
