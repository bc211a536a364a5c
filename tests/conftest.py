"""Every test reads autotune's output as a person on a terminal would, unless it asks for JSON;
the workers take the suite longest first, the real engines together
(tests/helpers/scheduling.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import scheduling


@pytest.fixture(autouse=True)
def _console_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest's captured stderr is not a terminal: without this, `auto` would pick JSON.
    monkeypatch.setenv("AUTOTUNE_LOG_FORMAT", "console")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = scheduling.longest_first(items, scheduling.load_weights())


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook; a run without it never asks
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return scheduling.make_scheduler(config, log)
