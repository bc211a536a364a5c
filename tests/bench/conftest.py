"""Shared helpers for the load-generator tests."""

from __future__ import annotations

from pathlib import Path

import pytest

STREAMS = Path(__file__).parent / "streams"


@pytest.fixture
def stream_bytes():
    def load(name: str) -> bytes:
        return (STREAMS / name).read_bytes()

    return load
