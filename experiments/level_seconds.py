"""What one benchmark level costs in wall seconds, on the served simulator, against the model.

    .venv/bin/python experiments/level_seconds.py [--profile NAME] [--json]

The sample-efficiency benchmark charges every simulated deployment the
seconds autotune's benchmark client would spend on each level
(`autotune/testservers/cost.py`). This script checks that charge: it serves the
simulator (`--sim-noise 0.02`, the default), runs autotune's own
`bench.run_level` with the default benchmark settings (window 5-30 s, CI
target ±2 %, warm-up one short request per client) at 1, 16 and 64 clients,
and prints the wall seconds of each level (warm-up, ramp-up, window, drain)
next to what `cost.Cost.level_parts` charges for its first run (the second
run of a level that missed its CI target is charged on top, as the trial
pipeline runs one; this client-only script does not). Writes
experiments/results/level_seconds.md. Run it on an idle machine: a busy one
stretches the client's own ticks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from autotune import bench  # noqa: E402
from autotune.config import BenchmarkConfig  # noqa: E402
from autotune.sim import model  # noqa: E402
from autotune.sim.predict import benchmark_input_len  # noqa: E402
from autotune.sim.profiles import PROFILES, get_profile  # noqa: E402
from autotune.testservers import cost  # noqa: E402
from experiments.sim_agreement import launch_flags, served  # noqa: E402

LEVELS = (1, 16, 64)
#: Per profile: SGLang's own choice, and a deep wide tree (slow per token, long requests).
SAMPLE: dict[str, list[tuple[tuple[int, int, int], tuple[str, ...]]]] = {
    "qwen3.5-122b-a10b-mtp": [((3, 1, 4), ("natural", "greedy")), ((1, 1, 2), ("natural",))],
    "llama3.1-8b-eagle3-h100": [((5, 4, 8), ("natural", "greedy")), ((7, 8, 32), ("natural",))],
    "deepseek-v3-mtp-8xh200": [((3, 1, 4), ("natural", "greedy")), ((1, 1, 2), ("natural",))],
}
RESULTS = REPO / "experiments" / "results" / "level_seconds.md"


async def measure_levels(url: str, workload_name: str) -> list[dict[str, Any]]:
    b = BenchmarkConfig()
    workload = bench.load_workload(workload_name, max_tokens=256)
    async with httpx.AsyncClient() as client:
        info = (await client.get(url + "/get_server_info")).json()
    slots = int(info["max_running_requests"])
    rows = []
    for c in LEVELS:
        settings = bench.LevelSettings(
            concurrency=c,
            min_duration_s=b.min_duration,
            max_duration_s=b.max_duration,
            ci_width=b.ci_width,
            server_slots=slots,
        )
        started = time.perf_counter()
        level = await bench.run_level(url, None, workload, settings)
        wall = time.perf_counter() - started
        rows.append(
            {
                "concurrency": c,
                "wall_s": round(wall, 2),
                "window_s": round(level.window_s, 2),
                "drain_s": round(level.drain_s, 2),
                "ci": round(level.ci_halfwidth, 4),
            }
        )
    return rows


def serve(flags: list[str], workload: str) -> list[dict[str, Any]]:
    with served(flags) as url:
        return asyncio.run(measure_levels(url, workload))


def charged(profile: str, knobs: tuple[int, int, int], workload: str) -> list[float]:
    p = get_profile(profile)
    resolved = model.resolve(p, model.Launch(p.default_algorithm, *knobs))
    assert not isinstance(resolved, model.Refusal)
    n = benchmark_input_len(workload)
    b = BenchmarkConfig()
    charge = cost.Cost(cost.LOAD_S[profile], p.tp, b)
    return [
        charge.level_parts(model.predict_level(p, resolved, c, workload, 256, n))[0] for c in LEVELS
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", action="append", help="default: all three")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--rows", type=Path, help="JSON lines of an earlier run: recharge them, measure nothing"
    )
    args = p.parse_args()
    rows = []
    if args.rows:
        if not args.rows.is_file():
            p.error(f"--rows: no such file: {args.rows}")
        for n, line in enumerate(args.rows.read_text().splitlines(), 1):
            try:
                row = json.loads(line)
                row["profile"], row["config"], row["workload"]
            except (ValueError, KeyError, TypeError) as exc:
                p.error(f"--rows: {args.rows}, line {n}: not a row of this script ({exc})")
            row["charged_s"] = [
                round(x, 2) for x in charged(row["profile"], tuple(row["config"]), row["workload"])
            ]
            rows.append(row)
        write(rows)
        return 0
    for profile in args.profile or list(PROFILES):
        for knobs, workloads in SAMPLE[profile]:
            for workload in workloads:
                served = serve(launch_flags(profile, knobs), workload)
                want = charged(profile, knobs, workload)
                row = {"profile": profile, "config": list(knobs), "workload": workload,
                       "levels": served, "charged_s": [round(x, 2) for x in want]}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    write(rows)
    return 0


def write(rows: list[dict[str, Any]]) -> None:
    lines = [
        "# Seconds per benchmark level: served simulator against the efficiency benchmark's charge",
        "",
        "Generated by `experiments/level_seconds.py`: autotune's `bench.run_level` with the "
        "default "
        "benchmark settings (window 5-30 s, CI target ±2 %) against the simulator "
        "(`--sim-noise 0.02`); wall = warm-up + ramp-up + window + drain. charged: what "
        "`autotune/testservers/cost.py` charges a simulated deployment for that level's "
        "first run "
        "(a level that misses its CI target is charged a second run on top, as the trial "
        "pipeline measures it again; this script does not).",
        "",
        "| profile | config | workload | c | wall s | window s | drain s | charged s "
        "| charged/wall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ratios = []
    for r in rows:
        for lv, want in zip(r["levels"], r["charged_s"], strict=True):
            ratio = want / lv["wall_s"]
            ratios.append(ratio)
            lines.append(
                f"| {r['profile']} | {tuple(r['config'])} | {r['workload']} | "
                f"{lv['concurrency']} | {lv['wall_s']:.1f} | {lv['window_s']:.1f} | "
                f"{lv['drain_s']:.1f} | {want:.1f} | {ratio:.2f} |"
            )
    total_ratio = sum(sum(r["charged_s"]) for r in rows) / sum(
        lv["wall_s"] for r in rows for lv in r["levels"]
    )
    lines += [
        "",
        f"Charged over served, all levels: {total_ratio:.2f} "
        f"(per level: median {statistics.median(ratios):.2f}, "
        f"range {min(ratios):.2f}-{max(ratios):.2f}).",
        "",
    ]
    RESULTS.write_text("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
