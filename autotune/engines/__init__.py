"""Engine adapters: one per inference server, behind `autotune.engines.base.Engine`.

    engine = get_engine("llama.cpp")        # target.engine in autotune.yaml
    info = await engine.server_info(url, ["spec_type"], api_key=None)
    info.max_running_requests               # SGLang's running-request cap; llama.cpp's slots
    engine_for(argv)                        # the engine whose server a unit's ExecStart runs

An engine-specific fact lives in its adapter; if shared code needs an
`if engine == ...`, the protocol lacks a method. A new engine is one file here and one
`register(...)` line below (or a `register` call from outside: tests/engines/test_third_engine.py).
"""

from __future__ import annotations

from collections.abc import Callable

from autotune.engines._http import auth_headers, get_json, key_refused
from autotune.engines.base import STUDY_FAILURES, Counters, Engine, Failure, ServerInfo
from autotune.engines.host import HOST_FAILURES, host_failure
from autotune.errors import AutotuneError, ConfigError

__all__ = [
    "HOST_FAILURES",
    "STUDY_FAILURES",
    "Counters",
    "Engine",
    "Failure",
    "ServerInfo",
    "auth_headers",
    "engine_for",
    "engine_names",
    "get_engine",
    "get_json",
    "host_failure",
    "key_refused",
    "register",
]

_FACTORIES: dict[str, Callable[[], Engine]] = {}
_ALIASES: dict[str, str] = {}


def register(name: str, factory: Callable[[], Engine], aliases: tuple[str, ...] = ()) -> None:
    """Make `name` (and its `aliases`, case-insensitive) a `target.engine` value."""
    _FACTORIES[name] = factory
    for key in (name, *aliases):
        _ALIASES[key.lower()] = name


def engine_names() -> tuple[str, ...]:
    """The names accepted in `target.engine`, in registration order."""
    return tuple(_FACTORIES)


def get_engine(name: str) -> Engine:
    """The adapter for `name` (case-insensitive); ConfigError for an unknown engine."""
    key = _ALIASES.get(name.strip().lower())
    if key is None:
        known = ", ".join(_FACTORIES)
        raise ConfigError(None, "target.engine", f"unknown engine {name!r} (known: {known})")
    return _FACTORIES[key]()


def engine_for(argv: list[str]) -> Engine:
    """The engine whose server `argv` (a unit's ExecStart) starts; AutotuneError naming what
    each known engine's command looks like when none claims it."""
    engines = [factory() for factory in _FACTORIES.values()]
    for engine in engines:
        if engine.launched_by(argv):
            return engine
    hints = " and ".join(e.launch_hint for e in engines)
    raise AutotuneError(
        f"cannot tell the engine from ExecStart ({' '.join(argv[:3])} ...): autotune knows {hints}"
    )


def _sglang() -> Engine:
    from autotune.engines.sglang import SGLangEngine

    return SGLangEngine()


def _llamacpp() -> Engine:
    from autotune.engines.llamacpp import LlamaCppEngine

    return LlamaCppEngine()


def _vllm() -> Engine:
    from autotune.engines.vllm import VLLMEngine

    return VLLMEngine()


register("sglang", _sglang)
register("llama.cpp", _llamacpp, aliases=("llamacpp", "llama-cpp"))
register("vllm", _vllm)
