"""The workers' order: real engines one unit and last, the others longest first, each in order."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.helpers.scheduling import REAL_ENGINES, longest_first, unit_of


def _items(*nodeids: str) -> list[Any]:
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def test_the_real_engines_are_one_unit_and_other_files_their_own() -> None:
    assert unit_of("tests/llamacpp/test_real_server.py::test_x") == REAL_ENGINES
    assert unit_of("tests/vllm/test_real_vllm.py::test_y[a::b]") == REAL_ENGINES
    assert unit_of("tests/deploy/test_tunnel.py::test_z") == "tests/deploy/test_tunnel.py"


def test_units_go_longest_first_and_keep_their_tests_in_order() -> None:
    items = _items(
        "tests/a.py::t1",
        "tests/llamacpp/test_x.py::t1",
        "tests/b.py::t1",
        "tests/a.py::t2",
        "tests/vllm/test_y.py::t1",
        "tests/c.py::t1",
    )
    weights = {"tests/a.py": 5.0, "tests/b.py": 50.0, "tests/llamacpp/test_x.py": 30.0,
               "tests/vllm/test_y.py": 30.0}  # fmt: skip
    order = [i.nodeid for i in longest_first(items, weights)]
    assert order == [
        "tests/b.py::t1",
        "tests/a.py::t1",
        "tests/a.py::t2",
        "tests/c.py::t1",  # not listed: one second a test
        "tests/llamacpp/test_x.py::t1",  # 60 s together, last: alone at the end of the run
        "tests/vllm/test_y.py::t1",
    ]
