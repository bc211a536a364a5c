"""Five fresh demos: does the best each declares hold where the others measured it?

    .venv/bin/python experiments/demo_headlines.py [--runs 5]

Each run is `make run` without the make: `autotune start --demo` in a fresh folder against
the real simulated server, then `autotune best --json`. Each run's row (the declared best,
its worth over its deployments with the 95 % interval, its gain over the unit as it was with
its interval, the spread between deployments, the headline `best` printed) is appended to
`experiments/results/raw/demo_headlines.jsonl` as it finishes, so a killed run resumes with the
runs it lacks. `experiments/results/demo_headlines.md` is rebuilt from every row: for each run,
whether its stated interval holds the other runs' values of the same config, and of their
declared bests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RAW = REPO / "experiments" / "results" / "raw" / "demo_headlines.jsonl"
OUT = REPO / "experiments" / "results" / "demo_headlines.md"
AUTOTUNE = [sys.executable, "-m", "autotune"]


def one_run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "AUTOTUNE_LOG_FORMAT": "console"}
        started = time.monotonic()
        proc = subprocess.run(
            [*AUTOTUNE, "start", "--demo"], cwd=tmp, capture_output=True, text=True, env=env
        )
        if proc.returncode != 0:
            raise SystemExit(f"autotune start --demo failed:\n{proc.stderr[-3000:]}")
        wall = time.monotonic() - started
        said = subprocess.run(
            [*AUTOTUNE, "best", "--demo"], cwd=tmp, capture_output=True, text=True, env=env
        ).stdout
        best = json.loads(
            subprocess.run(
                [*AUTOTUNE, "best", "--demo", "--json"], cwd=tmp, capture_output=True, text=True
            ).stdout
        )
        return {
            "wall_s": round(wall, 1),
            "trial": best["trial"],
            "config": best["resolved"],
            "over_deployments": best["metrics"].get("over_deployments"),
            "headline": said.splitlines()[0] if said else "",
            "printed": said,
        }


def report(rows: list[dict[str, Any]]) -> str:
    lines = [
        "# Five fresh demos: the declared best and its interval against the other runs",
        "",
        "Made by `experiments/demo_headlines.py` from "
        "`experiments/results/raw/demo_headlines.jsonl`: each",
        "run is `autotune start --demo` in a fresh folder (the simulator's noise drawn anew),",
        "then `autotune best`. `worth` is the declared best's geometric mean over its",
        "deployments with its 95 % interval; `holds` counts the other runs whose value of",
        "their own declared best falls inside this run's interval (the same config or not: a",
        "run that declares another config at a value inside the interval agrees that the",
        "difference is within what the study can tell).",
        "",
        "| run | commit | best trial | config (steps, topk, draft) | worth (95 %) | deployments "
        "| gain over the unit as it was (95 %) | spread | holds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    values = [r["over_deployments"]["value"] for r in rows if r.get("over_deployments")]
    for i, r in enumerate(rows, 1):
        d = r.get("over_deployments") or {}
        c = r["config"]
        shape = (
            f"{c.get('speculative_num_steps')}, {c.get('speculative_eagle_topk')}, "
            f"{c.get('speculative_num_draft_tokens')}"
        )
        low, high = d.get("low", 0.0), d.get("high", 0.0)
        others = [v for j, v in enumerate(values, 1) if j != i]
        held = sum(low <= v <= high for v in others)
        gain = d.get("gain") or {}
        gain_text = (
            f"{gain['point']:+.1%} ({gain['low']:+.1%} … {gain['high']:+.1%})" if gain else "—"
        )
        lines.append(
            f"| {i} | {r.get('commit', '?')} | {r['trial']} | {shape} | "
            f"{d.get('value', 0):.1f} ({low:.1f} … {high:.1f}) | {d.get('deployments', '?')} | "
            f"{gain_text} | {d.get('spread_sd', 0):.1%} | {held} of {len(others)} |"
        )
    lines += ["", "What each run printed first (`autotune best`):", ""]
    lines += [f"{i}. `{r['headline']}`" for i, r in enumerate(rows, 1)]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="rows the raw file should hold")
    args = p.parse_args()
    RAW.parent.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(x) for x in RAW.read_text().splitlines()] if RAW.exists() else []
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    while len(rows) < args.runs:
        row = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "commit": commit, **one_run()}
        with RAW.open("a") as f:
            f.write(json.dumps(row) + "\n")
        rows.append(row)
        print(f"run {len(rows)}: {row['headline']}", flush=True)
    OUT.write_text(report(rows))
    print(OUT.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
