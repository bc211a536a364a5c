"""Each cell's raw results, one JSON-lines file per cell, from which the table is rebuilt.

    experiments/results/raw/efficiency/<cell>.jsonl

Line 1 is the cell's header: the cell, the commit it ran at, the seeds, budget and noise,
the host counts of the several-hosts table, and its run time once it finished. Every
later line is one finished study: `{"candidate", "seed", "trace"}` for the main table or
`{"hosts", "seed", "trace"}` for the several-hosts table. A study is appended as it
finishes, so a killed run keeps what it had; run again with the same settings at the same
commit, it runs only the studies the file lacks. Other settings or another commit start the
cell's file afresh: a table never mixes what two versions of the code did in one cell.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from .cells import Cell
from .parallel import RoundsTrace
from .run import Trace

K = TypeVar("K")
T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
RAW_DIR = REPO / "experiments" / "results" / "raw" / "efficiency"


@dataclass(frozen=True)
class Settings:
    """What a cell's results depend on besides the code."""

    commit: str
    seeds: int
    budget: int
    noise: float
    hosts: tuple[int, ...]


@dataclass
class CellRaw:
    cell: Cell
    settings: Settings
    run: dict[str, Any] | None = None
    """The run that finished the cell: its command, commit, workers, start and run time
    (None: not finished)."""
    studies: dict[tuple[str, int], Trace] = dataclasses.field(default_factory=dict)
    rounds: dict[tuple[int, int], RoundsTrace] = dataclasses.field(default_factory=dict)


def head_commit() -> str:
    """HEAD's short hash, `+dirty` when the tree has uncommitted changes to tracked files
    other than results: a killed run has appended to its own raw file, and resumed it is
    still the same code (else it would start every study again)."""
    run = lambda *a: subprocess.run(a, cwd=REPO, capture_output=True, text=True).stdout.strip()  # noqa: E731
    commit = run("git", "rev-parse", "--short", "HEAD") or "unknown"
    changed = run("git", "status", "--porcelain", "-uno", "--", ".", ":!experiments/results")
    return commit + ("+dirty" if changed else "")


def path_of(cell: Cell, root: Path = RAW_DIR) -> Path:
    return root / (cell.label.replace(" ", "-") + ".jsonl")


def _encode(trace: Trace | RoundsTrace) -> dict[str, Any]:
    # inf (a study that never got there) is not JSON: written as null.
    return {
        k: (None if isinstance(v, float) and math.isinf(v) else v)
        for k, v in dataclasses.asdict(trace).items()
    }


def _decode_trace(data: Mapping[str, Any]) -> Trace:
    fields = {f.name for f in dataclasses.fields(Trace)}
    kept = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in fields}
    return Trace(**kept)


def _decode_rounds(data: Mapping[str, Any]) -> RoundsTrace:
    rounds = data["rounds"]
    return RoundsTrace(math.inf if rounds is None else rounds, data["deployments"])  # type: ignore[arg-type]


def load(path: Path) -> CellRaw | None:
    """A cell's file, or None when there is none (or it is not one of ours)."""
    if not path.exists():
        return None
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    if not lines or "cell" not in lines[0]:
        return None
    head = lines[0]
    s = head["settings"]
    raw = CellRaw(
        Cell(**head["cell"]),
        Settings(s["commit"], s["seeds"], s["budget"], s["noise"], tuple(s["hosts"])),
    )
    for line in lines[1:]:
        if "finished_by" in line:
            raw.run = line["finished_by"]
        elif "candidate" in line:
            raw.studies[(line["candidate"], line["seed"])] = _decode_trace(line["trace"])
        elif "hosts" in line:
            raw.rounds[(line["hosts"], line["seed"])] = _decode_rounds(line["trace"])
    return raw


def load_all(root: Path = RAW_DIR) -> list[CellRaw]:
    return [r for p in sorted(root.glob("*.jsonl")) if (r := load(p)) is not None]


class CellWriter:
    """Appends one cell's studies to its file as they finish."""

    def __init__(self, cell: Cell, settings: Settings, root: Path = RAW_DIR) -> None:
        self.path = path_of(cell, root)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        earlier = load(self.path)
        if earlier is not None and earlier.settings == settings:
            self.raw = earlier
            self.raw.run = None
        else:
            self.raw = CellRaw(cell, settings)
            head = {"cell": dataclasses.asdict(cell), "settings": dataclasses.asdict(settings)}
            self.path.write_text(json.dumps(head) + "\n")

    def has_study(self, candidate: str, seed: int) -> bool:
        return (candidate, seed) in self.raw.studies

    def has_rounds(self, hosts: int, seed: int) -> bool:
        return (hosts, seed) in self.raw.rounds

    def add_study(self, candidate: str, seed: int, trace: Trace) -> None:
        self.raw.studies[(candidate, seed)] = trace
        self._append({"candidate": candidate, "seed": seed, "trace": _encode(trace)})

    def add_rounds(self, hosts: int, seed: int, trace: RoundsTrace) -> None:
        self.raw.rounds[(hosts, seed)] = trace
        self._append({"hosts": hosts, "seed": seed, "trace": _encode(trace)})

    def finish(self, run: Mapping[str, Any]) -> None:
        """Mark the cell finished by `run` (command, commit, workers, started, seconds)."""
        self.raw.run = dict(run)
        self._append({"finished_by": self.raw.run})

    def _append(self, line: Mapping[str, Any]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")


def studies(raws: Iterable[CellRaw]) -> dict[tuple[Cell, str], list[Trace]]:
    """The main table's traces by (cell, candidate), seeds in order."""
    return _by_seed(raws, lambda r: r.studies)


def rounds(raws: Iterable[CellRaw]) -> dict[tuple[Cell, int], list[RoundsTrace]]:
    """The several-hosts table's traces by (cell, host count), seeds in order."""
    return _by_seed(raws, lambda r: r.rounds)


def _by_seed(
    raws: Iterable[CellRaw], part: Callable[[CellRaw], Mapping[tuple[K, int], T]]
) -> dict[tuple[Cell, K], list[T]]:
    out: dict[tuple[Cell, K], list[T]] = {}
    for r in raws:
        for (key, _), trace in sorted(part(r).items(), key=lambda kv: kv[0][1]):
            out.setdefault((r.cell, key), []).append(trace)
    return out
