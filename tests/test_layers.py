"""The house's shape, checked from the source: packages by job, imports in one direction.

Every import (lazy ones inside functions too) between the packages of `autotune/` is an
edge; the graph must have no cycle, so each package sits on a layer and imports only
from the layers below it. The root keeps what everything uses.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "autotune"
#: What the root keeps: what everything uses, the command line, and the entry points.
ROOT_MODULES = {"__init__", "__main__", "cli", "config", "errors", "expr", "log", "resources",
                "space", "yamlfile"}  # fmt: skip


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "autotune"


def _edges() -> dict[str, dict[str, str]]:
    """package -> {package it imports: where}"""
    out: dict[str, dict[str, str]] = defaultdict(dict)
    for path in ROOT.rglob("*.py"):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        here = _package(module.removesuffix(".__init__"))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = (
                    [f"autotune.{a.name}" for a in node.names]
                    if node.module == "autotune"
                    else [node.module]
                )
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name.startswith("autotune.") and _package(name) not in (here, "__version__"):
                    out[here].setdefault(_package(name), f"{path}:{node.lineno}")
    return out


def _layers(edges: dict[str, dict[str, str]]) -> dict[str, int]:
    """Each package's layer: one above the highest it imports (raises on a cycle)."""
    layer: dict[str, int] = {}
    visiting: list[str] = []

    def visit(p: str) -> int:
        if p in layer:
            return layer[p]
        if p in visiting:
            cycle = [*visiting[visiting.index(p) :], p]
            steps = [edges[a][b] for a, b in itertools.pairwise(cycle)]
            raise AssertionError(f"import cycle {' -> '.join(cycle)}: {steps}")
        visiting.append(p)
        layer[p] = 1 + max((visit(q) for q in edges.get(p, {})), default=-1)
        visiting.pop()
        return layer[p]

    for p in list(edges):
        visit(p)
    return layer


def test_the_packages_import_in_one_direction() -> None:
    layers = _layers(_edges())
    # The ones everything builds on are at the bottom, the command line on top.
    assert layers["unit"] < layers["space"] < layers["config"] < layers["search"]
    assert layers["search"] < layers["run"] < layers["commands"] < layers["cli"]
    assert layers["engines"] < layers["config"] and layers["deploy"] < layers["config"]


def test_the_root_holds_what_everything_uses() -> None:
    modules = {p.stem for p in ROOT.glob("*.py")}
    assert modules <= ROOT_MODULES, sorted(modules - ROOT_MODULES)
    assert len(modules) <= 10
    for package in (p for p in ROOT.iterdir() if p.is_dir() and p.name != "__pycache__"):
        face = package / "__init__.py"
        assert face.exists(), f"{package.name}/ has no __init__.py"
        assert ast.get_docstring(ast.parse(face.read_text())), f"{package.name}/ says nothing"


def test_engine_facts_stay_in_engines() -> None:
    """An `if engine == ...` outside engines/ means the Engine protocol lacks a method."""
    pattern = re.compile(r'engine\s*==|==\s*"sglang"|"llama\.cpp"')
    found = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(("engines/", "sim/")):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, found


def _module_edges() -> dict[str, dict[str, str]]:
    """module -> {module it imports: where}, every import counted: at the top, inside a
    function, under `TYPE_CHECKING`. `from autotune.search import gp` names the module
    `autotune.search.gp`; `from autotune.search.gp import GP` the module that holds it
    when it is one, else the package."""
    modules: dict[str, Path] = {}
    for path in ROOT.rglob("*.py"):
        name = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    out: dict[str, dict[str, str]] = defaultdict(dict)
    for here, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
                    for _ in range(node.level - 1):
                        package = package.rpartition(".")[0]
                    base = f"{package}.{base}" if base else package
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                         for a in node.names]  # fmt: skip
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                target = owner(name) if name.startswith("autotune") else None
                if target is not None and target != here:
                    out[here].setdefault(target, f"{path.name}:{node.lineno}")
    return out


def test_no_module_imports_itself_back() -> None:
    """No cycle between modules either (issue 49: search/capacity -> gp -> gp/sampler ->
    capacity, and run/trial <-> run/rates under TYPE_CHECKING, are cut): what one module
    needs of another it imports, never the other way round as well."""
    edges = _module_edges()
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            cycle = [*path[path.index(m) :], m]
            steps = [edges[a][b] for a, b in itertools.pairwise(cycle)]
            raise AssertionError(f"import cycle {' -> '.join(cycle)}: {steps}")
        if m in done:
            return
        for n in edges.get(m, {}):
            visit(n, [*path, m])
        done.add(m)

    for m in list(edges):
        visit(m, [])
    assert len(edges) > 50  # the walk saw the package


def test_the_simulator_keeps_its_own_physics() -> None:
    """Issue 50: the performance model is graded on the simulator, so the simulator borrows
    nothing from the search (it once took its tree acceptance from `search/perf`). What
    both need of the engine (SGLang's memory rule) lives in `engines/`, below both."""
    edges = _module_edges()
    borrowed = {
        f"{here} -> {there} ({where})"
        for here, targets in edges.items()
        if here.startswith("autotune.sim")
        for there, where in targets.items()
        if there.startswith("autotune.search")
    }
    assert not borrowed, sorted(borrowed)
    assert any(t.startswith("autotune.engines") for t in edges["autotune.sim.model"])


def test_commands_holds_only_subcommands() -> None:
    """Issue 55: each module of `commands/` is one subcommand's work, called by the command
    line alone (a module another package imports has a job of its own: `export/` took
    the exporters and the phase summary out of it)."""
    edges = _module_edges()
    commands = {f"autotune.commands.{p.stem}" for p in (ROOT / "commands").glob("*.py")}
    commands.discard("autotune.commands.__init__")
    outside = {
        f"{here} -> {there} ({where})"
        for here, targets in edges.items()
        if not here.startswith(("autotune.commands", "autotune.cli"))
        for there, where in targets.items()
        if there.startswith("autotune.commands")
    }
    assert not outside, sorted(outside)
    assert commands <= set(edges["autotune.cli"]), sorted(commands - set(edges["autotune.cli"]))


def _imports_of(folder: Path) -> dict[str, set[str]]:
    """Top-level package each file under `folder` imports -> where."""
    out: dict[str, set[str]] = defaultdict(set)
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                out[name.partition(".")[0]].add(f"{path.relative_to(folder.parent)}:{node.lineno}")
    return out


def test_neither_the_package_nor_the_experiments_import_the_tests() -> None:
    """Issue 55: what the tests and the experiments both start (sshd, PostgreSQL, the
    simulator's unit, a free port, a study played in process on the simulator's landscape)
    lives in `autotune/testservers/`; shipped code and experiments never reach into
    `tests/` (the experiments' own tests, experiments/tests/, neither)."""
    for folder in (ROOT, ROOT.parent / "experiments"):
        assert not _imports_of(folder).get("tests"), sorted(_imports_of(folder)["tests"])


def test_the_tests_do_not_import_the_experiments() -> None:
    """Issue 55, the other direction: a test of autotune plays its studies on
    `testservers/` and runs an experiment's script by path, as a user does."""
    tests = ROOT.parent / "tests"
    assert not _imports_of(tests).get("experiments"), sorted(_imports_of(tests)["experiments"])


def test_one_folder_per_name() -> None:
    """Issue 55: no two folders named alike at any depth of `autotune/` and the top level
    (the experiments were `bench/` beside the load generator `autotune/bench/`). `tests/`
    mirrors `autotune/` on purpose and is not counted."""
    repo = ROOT.parent
    names = [p.name for p in ROOT.rglob("*") if p.is_dir() and p.name != "__pycache__"]
    names += [p.name for p in repo.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
              and p.name not in ("build", "dist") and not p.name.endswith(".egg-info")]  # fmt: skip
    twice = sorted({n for n in names if names.count(n) > 1})
    assert not twice, twice
