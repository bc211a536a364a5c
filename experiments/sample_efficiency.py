"""Sample efficiency: how many deployments autotune's study needs, against random and grid search.

    .venv/bin/python experiments/sample_efficiency.py [--seeds 24] \
        [--candidates default,random,grid]

Runs autotune's own study loop (`worker.Worker`: sampler, space encoding,
baseline, dedupe, constraints, infeasible handling) against the simulator's
noise-bearing model in process, for every cell (search space x simulator
profile x workload x objective) and seed, and writes the table to
experiments/results/sample_efficiency.md. See docs/sample-efficiency.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.testservers.simulated import SIM_NOISE  # noqa: E402
from experiments.efficiency import metrics, parallel, raw, replay, report  # noqa: E402
from experiments.efficiency.candidates import CANDIDATES, CORE, GPU_TIME  # noqa: E402
from experiments.efficiency.cells import Cell, all_cells  # noqa: E402
from experiments.efficiency.parallel import RoundsTrace, run_rounds  # noqa: E402
from experiments.efficiency.run import Trace, run_one  # noqa: E402

Job = tuple[Cell, str, int, int, float]


def _quiet() -> None:
    from autotune import log

    log.setup("ERROR")


def _run(job: Job) -> tuple[Job, Trace]:
    cell, candidate, seed, budget, noise = job
    return job, run_one(cell, candidate, seed, budget, noise)


def _collect(
    fn: Callable[[Any], tuple[Any, Any]],
    jobs: list[Any],
    workers: int,
    on_result: Callable[[Any, Any], None],
) -> None:
    """Run the jobs on `workers` processes, handing each result to `on_result(job, result)`
    as it comes (the raw files keep what a killed run had)."""
    # The GP's matrices are tiny: BLAS threads would only fight the other worker for a
    # core. Spawned workers inherit the environment before they import numpy.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    if workers <= 1:
        _quiet()
        for job in jobs:
            on_result(*fn(job))
        return
    with multiprocessing.get_context("spawn").Pool(workers, initializer=_quiet) as pool:
        for job, trace in pool.imap_unordered(fn, jobs):
            on_result(job, trace)


def _study_jobs(
    cells: list[Cell],
    candidates: list[str],
    seeds: int,
    budget: int,
    noise: float,
    done: Callable[[Cell, str, int], bool],
) -> list[Job]:
    # Slow candidates first, so that the pool does not end waiting on one straggler.
    return [
        (cell, name, seed, budget, noise)
        for name in sorted(candidates, key=lambda n: not CANDIDATES[n].needs_torch)
        for cell in cells
        for seed in range(seeds)
        if runs_on(cell, name) and not done(cell, name, seed)
    ]


def runs_on(cell: Cell, candidate: str) -> bool:
    """A replay cell runs its own few candidates (`replay.CANDIDATES`: the others are SGLang's
    grid and endpoint, or the default with a model that is off there anyway)."""
    return cell.space != replay.SPACE or candidate in replay.CANDIDATES


HostsJob = tuple[Cell, int, int, int, float]


def _run_hosts(job: HostsJob) -> tuple[HostsJob, RoundsTrace]:
    cell, seed, hosts, rounds, noise = job
    return job, run_rounds(cell, seed, hosts, rounds, noise)


def run_recorded(
    cells: list[Cell],
    candidates: list[str],
    settings: raw.Settings,
    workers: int,
    command: str,
    root: Path = raw.RAW_DIR,
) -> float:
    """Run what the cells' raw files lack, appending each study as it finishes; mark each
    cell finished. Returns the run's wall time."""
    started, wall = time.monotonic(), time.strftime("%Y-%m-%d %H:%M:%S %Z")
    writers = {cell: raw.CellWriter(cell, settings, root) for cell in cells}
    jobs = _study_jobs(
        cells,
        candidates,
        settings.seeds,
        settings.budget,
        settings.noise,
        lambda cell, name, seed: writers[cell].has_study(name, seed),
    )
    _collect(_run, jobs, workers, lambda j, t: writers[j[0]].add_study(j[1], j[2], t))
    host_jobs = [
        (c, seed, h, settings.budget, settings.noise)
        for h in settings.hosts
        for c in cells
        for seed in range(settings.seeds)
        if not writers[c].has_rounds(h, seed)
    ]
    _collect(_run_hosts, host_jobs, workers, lambda j, t: writers[j[0]].add_rounds(j[2], j[1], t))
    seconds = time.monotonic() - started
    run_info = {
        "command": command,
        "commit": settings.commit,
        "workers": workers,
        "started": wall,
        "seconds": round(seconds, 1),
        "cells": len(cells),
    }
    for w in writers.values():
        w.finish(run_info)
    return seconds


class RawError(Exception):
    """The raw files cannot make one table."""


def rebuild(out: Path, root: Path = raw.RAW_DIR) -> str:
    """The whole table from every cell's raw file; written to `out`."""
    raws = [r for r in raw.load_all(root) if r.run is not None]
    if not raws:
        raise RawError(f"no finished cell under {root}: run the cells first")
    budgets = {r.settings.budget for r in raws}
    if len(budgets) > 1:
        raise RawError(
            f"the cells under {root} ran with budgets {sorted(budgets)}: rerun them with one "
            "--budget"
        )
    budget = budgets.pop()
    traces = raw.studies(raws)
    results = {key: metrics.summarise(ts, budget) for key, ts in traces.items()}
    candidates = list(dict.fromkeys(name for _, name in sorted(traces, key=_order)))
    text = report.markdown(results, candidates, budget=budget, provenance=provenance(raws))
    host_traces = raw.rounds(raws)
    hosts = sorted({h for _, h in host_traces})
    if hosts and hosts[0] == 1:
        text += "\n" + parallel.markdown(host_traces, hosts, budget)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return text


def _order(key: tuple[Cell, str]) -> int:
    names = list(CANDIDATES)
    return names.index(key[1]) if key[1] in names else len(names)


def provenance(raws: list[raw.CellRaw]) -> list[str]:
    """The table's first lines: the commit, the command and the run time of every run whose
    cells it shows (one run, when `make bench-efficiency` rebuilt it whole)."""
    runs: dict[tuple[str, str], list[raw.CellRaw]] = defaultdict(list)
    for r in raws:
        assert r.run is not None
        runs[(r.run["started"], r.run["commit"])].append(r)
    lines = []
    for (started, commit), rs in sorted(runs.items()):
        run_info, s = rs[0].run, rs[0].settings
        assert run_info is not None
        seconds = float(run_info["seconds"])
        lines.append(
            f"Commit `{commit}`: `{run_info['command']}`, started {started}, ran "
            f"{len(rs)} of {len(raws)} cells in {seconds:.0f} s ({seconds / 60:.1f} min) on "
            f"{run_info['workers']} worker(s): {s.seeds} seeds per cell, at most {s.budget} "
            f"deployments per study, simulator noise {100 * s.noise:g} % per start plus the "
            "benchmark's own sampling error (a foreign or replay cell draws at the spread its "
            "source states, below)."
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    # 24 seeds, about 45 minutes on 2 cores. At 12 a plateau cell's median spanned 7-14
    # deployments (95 %), and three lucky random draws put no-predict ahead of the default;
    # at 48 seeds the same cell gave 11 (9-13) against 15 (10-20). The interval is printed
    # beside every median.
    p.add_argument("--seeds", type=int, default=24)
    p.add_argument("--budget", type=int, default=30, help="deployments per study")
    p.add_argument(
        "--candidates",
        default=",".join(CORE + GPU_TIME),
        help=f"comma-separated, or 'all' ({', '.join(CANDIDATES)})",
    )
    p.add_argument(
        "--cells", default="", help="only cells whose label contains one of these (comma-separated)"
    )
    p.add_argument("--noise", type=float, default=SIM_NOISE, help="the sim's --sim-noise")
    p.add_argument("--workers", type=int, default=multiprocessing.cpu_count())
    p.add_argument(
        "--hosts",
        default="1,2,4",
        help="host counts for the several-hosts table, comma-separated ('' skips it)",
    )
    p.add_argument("--out", default=str(REPO / "experiments" / "results" / "sample_efficiency.md"))
    p.add_argument(
        "--rebuild",
        action="store_true",
        help="only rebuild the table from the raw files under --raw",
    )
    p.add_argument(
        "--raw", default=str(raw.RAW_DIR), help="each cell's raw results (one file per cell)"
    )
    args = p.parse_args(argv)
    names = list(CANDIDATES) if args.candidates == "all" else args.candidates.split(",")
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        p.error(f"unknown candidate(s): {', '.join(unknown)}")
    if any(CANDIDATES[n].needs_torch for n in names) and importlib.util.find_spec("torch") is None:
        p.error("optuna-gp needs PyTorch: pip install 'autotune[optuna-gp]'")
    if args.seeds < 1 or args.budget < 1:
        p.error(f"--seeds and --budget must be at least 1, got {args.seeds} and {args.budget}")
    try:
        hosts = [int(h) for h in args.hosts.split(",") if h.strip()]
    except ValueError:
        hosts = [0]
    if hosts and (hosts[0] != 1 or any(h < 1 for h in hosts)):
        p.error(f"--hosts must start with 1 (the reference), got {args.hosts!r}")
    wanted = args.cells.split(",")
    cells = [c for c in all_cells() if any(w in c.label for w in wanted)]
    if not cells:
        p.error(
            f"--cells {args.cells!r} matches no cell (labels look like 'eagle qwen natural c1')"
        )
    if not args.rebuild:
        settings = raw.Settings(
            raw.head_commit(), args.seeds, args.budget, args.noise, tuple(hosts)
        )
        given = argv if argv is not None else sys.argv[1:]
        command = " ".join(["experiments/sample_efficiency.py", *given])
        seconds = run_recorded(cells, names, settings, args.workers, command, Path(args.raw))
        print(f"ran {len(cells)} cell(s) in {seconds:.0f} s", file=sys.stderr)
    try:
        text = rebuild(Path(args.out), Path(args.raw))
    except RawError as e:
        p.error(str(e))
    print(text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
