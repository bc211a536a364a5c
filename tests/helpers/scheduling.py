"""How pytest-xdist hands the suite to its workers: the longest work first, the real engines
together.

A worker takes a whole file (a module's fixtures start once), as `--dist loadfile` does, but:

- every file of tests/llamacpp/ and tests/vllm/ is one unit of work, so one worker runs the
  real engines back to back (each its own session fixture once): two real servers on two
  cores would slow each other past their timeouts and make their figures meaningless;
- that unit goes out last, when the other worker is on its last files: given out first, it
  ran beside the fleet tests' simulators and daemons, and llama-server, starved, failed its
  open-loop and n-gram tests (a clean clone's CI run, 2026-12-06);
- the other units go out longest first, by tests/durations.json (seconds per file, written
  by `experiments/test_durations.py --weights` from a measured run), so the run does not end on
  one worker finishing a long file alone. A file it does not list counts a second per test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.real_engine import FOLDERS

WEIGHTS = Path(__file__).parents[1] / "durations.json"
REAL_ENGINES = "real engines"


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, or the real engines' group."""
    path = nodeid.split("::", 1)[0]
    return REAL_ENGINES if path.startswith(FOLDERS) else path


def load_weights(path: Path = WEIGHTS) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError):
        return {}


def longest_first(items: list[pytest.Item], weights: dict[str, float]) -> list[pytest.Item]:
    """`items` regrouped by unit, units in order of their expected seconds, most first, the
    real engines last; the tests of a unit keep their order."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(unit_of(item.nodeid), []).append(item)

    def expected(unit: str) -> float:
        per_file: dict[str, int] = {}
        for item in units[unit]:
            path = item.nodeid.split("::", 1)[0]
            per_file[path] = per_file.get(path, 0) + 1
        return sum(weights.get(path, float(n)) for path, n in per_file.items())

    order = sorted(units, key=lambda unit: (unit == REAL_ENGINES, -expected(unit)))
    return [item for unit in order for item in units[unit]]


def make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class LongestFirst(LoadScopeScheduling):
        def __init__(self, config: pytest.Config, log: Any = None) -> None:
            super().__init__(config, log)
            # Keep the collection's order (longest_first); xdist would sort by test count.
            config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return LongestFirst(config, log)
