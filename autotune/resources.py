"""Files that ship with autotune: the demo config, its unit file, the search spaces."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
# A source checkout (editable install) keeps them beside the package; a wheel under _data/.
_ROOTS = (_PACKAGE.parent, _PACKAGE / "_data")


def _find(*parts: str) -> Path | None:
    for root in _ROOTS:
        candidate = root.joinpath(*parts)
        if candidate.exists():
            return candidate
    return None


def demo_config() -> Path:
    found = _find("examples", "demo.yaml")
    if found is None:
        raise FileNotFoundError("the built-in demo (examples/demo.yaml) is not installed")
    return found


def search_space(name: str) -> Path | None:
    """A built-in search space by file name, with or without .yaml."""
    for candidate in (name, f"{name}.yaml"):
        found = _find("search_spaces", Path(candidate).name)
        if found is not None and Path(candidate).name == candidate:
            return found
    return None


def example(name: str) -> Path | None:
    """A shipped example (a config or a unit file) by file name."""
    return _find("examples", Path(name).name)
