"""Sample efficiency: how many deployments autotune's study needs, against random and grid search.

    .venv/bin/python bench/sample_efficiency.py [--seeds 20] [--candidates default,random,grid]

Runs autotune's own study loop (`worker.Worker`: sampler, space encoding,
baseline, dedupe, constraints, infeasible handling) against the simulator's
noise-bearing model in process, for every cell (search space x simulator
profile x workload x objective) and seed, and writes the table to
bench/results/sample_efficiency.md. See docs/sample-efficiency.md.
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

from bench.efficiency import metrics, parallel, report  # noqa: E402
from bench.efficiency.candidates import CANDIDATES, CORE, GPU_TIME  # noqa: E402
from bench.efficiency.cells import Cell, all_cells  # noqa: E402
from bench.efficiency.parallel import RoundsTrace, run_rounds  # noqa: E402
from bench.efficiency.run import Trace, run_one  # noqa: E402
from bench.efficiency.simulated import SIM_NOISE  # noqa: E402

Job = tuple[Cell, str, int, int, float]


def _quiet() -> None:
    from autotune import log

    log.setup("ERROR")


def _run(job: Job) -> tuple[Cell, str, Trace]:
    cell, candidate, seed, budget, noise = job
    return cell, candidate, run_one(cell, candidate, seed, budget, noise)


def _collect(fn: Callable[[Any], tuple[Cell, Any, Any]], jobs: list[Any], workers: int) -> Any:
    """Run the jobs on `workers` processes; group the results by (cell, key)."""
    # The GP's matrices are tiny: BLAS threads would only fight the other worker for a
    # core. Spawned workers inherit the environment before they import numpy.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    grouped: dict[tuple[Cell, Any], list[Any]] = defaultdict(list)
    if workers <= 1:
        _quiet()
        for cell, key, trace in map(fn, jobs):
            grouped[(cell, key)].append(trace)
        return grouped
    with multiprocessing.get_context("spawn").Pool(workers, initializer=_quiet) as pool:
        for cell, key, trace in pool.imap_unordered(fn, jobs, chunksize=4):
            grouped[(cell, key)].append(trace)
    return grouped


def run(
    cells: list[Cell],
    candidates: list[str],
    seeds: int,
    budget: int,
    workers: int,
    noise: float = SIM_NOISE,
) -> dict[tuple[Cell, str], list[Trace]]:
    # Slow candidates first, so that the pool does not end waiting on one straggler.
    jobs = [
        (cell, name, seed, budget, noise)
        for name in sorted(candidates, key=lambda n: not CANDIDATES[n].needs_torch)
        for cell in cells
        for seed in range(seeds)
    ]
    return _collect(_run, jobs, workers)


HostsJob = tuple[Cell, int, int, int, float]


def _run_hosts(job: HostsJob) -> tuple[Cell, int, RoundsTrace]:
    cell, seed, hosts, rounds, noise = job
    return cell, hosts, run_rounds(cell, seed, hosts, rounds, noise)


def run_hosts(
    cells: list[Cell], hosts: list[int], seeds: int, rounds: int, workers: int, noise: float
) -> dict[tuple[Cell, int], list[RoundsTrace]]:
    jobs = [(c, seed, h, rounds, noise) for h in hosts for c in cells for seed in range(seeds)]
    return _collect(_run_hosts, jobs, workers)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=20)
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
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "sample_efficiency.md"))
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
    started = time.monotonic()
    traces = run(cells, names, args.seeds, args.budget, args.workers, args.noise)
    seconds = time.monotonic() - started
    results = {key: metrics.summarise(ts, args.budget) for key, ts in traces.items()}
    text = report.markdown(
        results,
        names,
        seeds=args.seeds,
        budget=args.budget,
        noise=args.noise,
        seconds=seconds,
        workers=args.workers,
    )
    if hosts:
        started = time.monotonic()
        host_traces = run_hosts(cells, hosts, args.seeds, args.budget, args.workers, args.noise)
        text += "\n" + parallel.markdown(host_traces, hosts, args.budget)
        text += f"\n(several-hosts table: {time.monotonic() - started:.0f} s)\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)
    print(f"wrote {args.out} in {seconds:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
