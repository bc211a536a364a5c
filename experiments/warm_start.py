"""Warm start: a second study with `start --from` the first, against a cold one.

    .venv/bin/python experiments/warm_start.py [--seeds 12] [--cells LABEL,...] [--workers 2]

For every simulator cell of the efficiency harness (`experiments/efficiency/`) and seed: an
earlier study (the default, `EARLIER_BUDGET` deployments, its own noise draw), then the
second study twice on the changed world, the same seed (the same noise) for both: cold, and
with the earlier study's record as `start --from` writes it (`warm_start.Earlier.record`,
read against the new study's config; once the baseline is measured, `warm_start.check`
decides whether its winner and the configs it could not tell from it go first, or whether
the world moved and the study runs cold). A change is:

- `noise`: the same profile and workload, another draw of the noise (a restart, a week
  later: the small change);
- `workload`: the other workload of the same profile (the traffic moved): natural <-> greedy
  on the simulator, and natural <-> copy on the replayed real llama-server (`replay.py`, the
  recorded sweep: the simulator has no copy workload);
- `hardware`: the next simulator profile over the same space (another model on other GPUs:
  the simulator has no profile of one model on two kinds of GPU).

Each (change, cell, seed) is appended to `experiments/results/raw/warm_start.jsonl` as it
finishes (a killed run keeps what it had and runs only what is missing at the same commit);
the table is rebuilt whole from it into `experiments/results/warm_start.md`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.search import study as st  # noqa: E402
from autotune.search import warm_start  # noqa: E402
from autotune.sim.profiles import PROFILES  # noqa: E402
from experiments.efficiency import metrics, raw, replay  # noqa: E402
from experiments.efficiency.cells import SPACES, Cell, all_cells, landscape  # noqa: E402
from experiments.efficiency.run import play  # noqa: E402

RAW = REPO / "experiments" / "results" / "raw" / "warm_start.jsonl"
OUT = REPO / "experiments" / "results" / "warm_start.md"
#: Deployments the earlier study ran: a finished study of the default (its finalists too).
EARLIER_BUDGET = 15
BUDGET = 30
#: Each change: the earlier study's cell from the new one's, and its seed from the new seed.
CHANGES = {
    "noise": "the same cell, another draw of the noise",
    "workload": "the other workload of the same profile (natural <-> greedy on the simulator, "
    "natural <-> copy on the replayed llama-server)",
    "hardware": "the next simulator profile over the same space (qwen -> llama -> deepseek -> "
    "qwen: another model on other GPUs)",
}

Job = tuple[str, Cell, int]


def earlier_of(change: str, cell: Cell, seed: int) -> tuple[Cell, int]:
    if change == "noise":
        return cell, seed + 1000
    if change == "workload":
        pair = ("natural", "copy") if cell.space == replay.SPACE else ("natural", "greedy")
        other = pair[1] if cell.workload == pair[0] else pair[0]
        return Cell(cell.space, cell.profile, other, cell.objective), seed + 1000
    if change == "hardware":
        names = list(PROFILES)
        after = names[(names.index(cell.profile) + 1) % len(names)]
        return Cell(cell.space, after, cell.workload, cell.objective), seed + 1000
    raise KeyError(change)


def applies(change: str, cell: Cell) -> bool:
    """The replayed llama-server has one machine and its own space: only its workload moves."""
    return cell.space in SPACES or change == "workload"


def run(job: Job) -> tuple[Job, dict[str, Any]]:
    from autotune import log

    log.setup("ERROR")
    change, cell, seed = job
    before_cell, before_seed = earlier_of(change, cell, seed)
    before = play(before_cell, "default", before_seed, EARLIER_BUDGET)
    declared = st.best_trials(before.study)
    # Read as `start --from` reads it: against the new study's config, so that the record
    # names what differs (the workload).
    earlier = warm_start.of_study(
        landscape(cell).cfg, before.study, "in memory", declared[0] if declared else None
    )
    record = earlier.record()
    if before_cell.profile != cell.profile:
        # Every simulated cell runs the demo unit; a real unit names its model, and the
        # simulator's names its profile (`--sim-profile`): the flag `start --from` would
        # find changed.
        record["differences"]["--sim-profile"] = {
            "earlier": before_cell.profile,
            "now": cell.profile,
        }
    cold = play(cell, "default", seed, BUDGET).trace
    warm = play(cell, "default", seed, BUDGET, earlier=record).trace
    return job, {
        "change": change,
        "cell": cell.label,
        "seed": seed,
        "cold": _figures(cold),
        "warm": _figures(warm),
        "first": len(warm_start.first_configs(record, before.cfg.benchmark.finalists)),
    }


def _figures(trace: Any) -> dict[str, Any]:
    t98 = metrics.trials_to_target(trace)
    return {
        "t98": None if t98 == float("inf") else int(t98),
        "best_ratio": list(trace.best_ratio),
        "applied": list(trace.applied),
    }


def _done(path: Path, commit: str) -> dict[tuple[str, str, int], dict[str, Any]]:
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("commit") == commit:
            out[(row["change"], row["cell"], row["seed"])] = row
    return out


def latest_rows(path: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Each change's rows at the last commit that ran it (a change run again at a later
    commit replaces its rows; the other changes keep theirs), and that commit per change."""
    if not path.exists():
        return [], {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    commit_of = {r["change"]: r["commit"] for r in rows}  # the file is in time order
    return [r for r in rows if r["commit"] == commit_of[r["change"]]], commit_of


def _q(xs: list[float], share: float) -> float:
    """Nearest rank (as the efficiency table): inf counts as not reached."""
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, int(-(-share * len(s) // 1)) - 1))]


def table(rows: list[dict[str, Any]], commits: dict[str, str], seconds: float | None) -> str:
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[(r["change"], r["cell"])].append(r)

    def t(r: dict[str, Any], arm: str) -> float:
        v = r[arm]["t98"]
        return float("inf") if v is None else float(v)

    def n(x: float) -> str:
        return f">{BUDGET}" if x == float("inf") else f"{x:.0f}"

    seeds = len(next(iter(by.values()))) if by else 0
    ran = f" (this run: {seconds / 60:.1f} min)" if seconds is not None else ""
    lines = [
        "# Warm start: a second study `--from` the first, against a cold one",
        "",
        f"`experiments/warm_start.py --changes {','.join(commits)}`, {seeds} seeds per "
        f"cell{ran}; each change at the commit that last ran it (below). The earlier "
        f"study: the default, {EARLIER_BUDGET} deployments; the second: at most {BUDGET}, cold "
        "and warm on the same seed (the same noise). Deployments until the declared best is "
        "worth 98 % of the new optimum (the baseline is 1), median / p90 over the seeds "
        "(nearest rank); applied@30: share of studies whose end applies a config worth 98 %.",
        "",
        *[f"- `{c}` (at `{commits[c]}`): {about}." for c, about in CHANGES.items() if c in commits],
        "",
        "| change | cell | cold: median / p90 | --from: median / p90 | declared best at "
        f"{BUDGET}: cold / --from | applied@30: cold / --from | worse seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    summary: dict[str, list[float]] = defaultdict(list)
    for (change, cell), rs in sorted(by.items()):
        cold, warm = [t(r, "cold") for r in rs], [t(r, "warm") for r in rs]
        worse = sum(w > c for c, w in zip(cold, warm, strict=True))
        ac = statistics.fmean(r["cold"]["applied"][-1] >= 0.98 for r in rs)
        aw = statistics.fmean(r["warm"]["applied"][-1] >= 0.98 for r in rs)
        end_c = statistics.median(r["cold"]["best_ratio"][-1] for r in rs)
        end_w = statistics.median(r["warm"]["best_ratio"][-1] for r in rs)
        lines.append(
            f"| {change} | {cell} | {n(_q(cold, 0.5))} / {n(_q(cold, 0.9))} "
            f"| {n(_q(warm, 0.5))} / {n(_q(warm, 0.9))} "
            f"| {100 * end_c:.1f} % / {100 * end_w:.1f} % "
            f"| {100 * ac:.0f} % / {100 * aw:.0f} % | {worse} of {len(rs)} |"
        )
        summary[f"{change} cold"].append(_q(cold, 0.5))
        summary[f"{change} warm"].append(_q(warm, 0.5))
    lines += [""]
    for change in CHANGES:
        if summary[f"{change} cold"]:
            lines.append(
                f"- {change}: median over the cells of the per-cell medians: cold "
                f"{n(statistics.median(summary[f'{change} cold']))}, --from "
                f"{n(statistics.median(summary[f'{change} warm']))}."
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", type=int, default=12)
    p.add_argument("--cells", default="", help="only cells whose label contains one of these")
    p.add_argument("--changes", default="noise", help=f"comma-separated: {', '.join(CHANGES)}")
    p.add_argument("--workers", type=int, default=multiprocessing.cpu_count())
    args = p.parse_args()
    wanted = args.cells.split(",")
    cells = [
        c
        for c in all_cells()
        if c.space in (*SPACES, replay.SPACE) and any(w in c.label for w in wanted)
    ]
    if not cells:
        p.error(f"--cells {args.cells!r} matches no simulator or replay cell")
    changes = args.changes.split(",")
    if unknown := [c for c in changes if c not in CHANGES]:
        p.error(f"unknown change(s): {', '.join(unknown)} (known: {', '.join(CHANGES)})")
    commit = raw.head_commit()
    done = _done(RAW, commit)
    jobs = [
        (change, cell, seed)
        for change in changes
        for cell in cells
        for seed in range(args.seeds)
        if (change, cell.label, seed) not in done and applies(change, cell)
    ]
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    started = time.monotonic()
    RAW.parent.mkdir(parents=True, exist_ok=True)
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool, RAW.open("a") as f:
        for _job, row in pool.imap_unordered(run, jobs):
            f.write(json.dumps({**row, "commit": commit}) + "\n")
            f.flush()
    seconds = time.monotonic() - started
    rows, commits = latest_rows(RAW)
    text = table(rows, commits, seconds if jobs else None)
    OUT.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
