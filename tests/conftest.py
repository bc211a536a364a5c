"""Every test reads autotune's output as a person on a terminal would, unless it asks for JSON."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _console_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest's captured stderr is not a terminal: without this, `auto` would pick JSON.
    monkeypatch.setenv("AUTOTUNE_LOG_FORMAT", "console")
