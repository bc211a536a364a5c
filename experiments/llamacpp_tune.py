"""Tune a real llama-server on this CPU, once per workload, and measure each winner's gain.

    make llamacpp            # installs llama.cpp + model, then runs this
    .venv/bin/python experiments/llamacpp_tune.py [--workloads natural,copy] [--rounds 2]

For each workload: a fresh study of examples/llamacpp-local.yaml (its own
SQLite file in --db-dir), then the declared winner and `--spec-type none`
re-measured side by side, interleaved (winner, none, winner, none, ...), so
the gain is a ratio of measurements taken in the same minutes. Writes
experiments/results/llamacpp.md and prints the table. Run it on an otherwise idle
machine: a build or a test suite beside it stalls llama-server's threads.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune import log  # noqa: E402
from autotune.config import Config, load_config  # noqa: E402
from autotune.engines import get_engine  # noqa: E402
from autotune.run import deployment, finalists, loop  # noqa: E402
from autotune.run.trial import TrialPipeline  # noqa: E402
from autotune.search import study as st  # noqa: E402

NONE = {"spec_type": "none"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(REPO / "examples" / "llamacpp-local.yaml"))
    p.add_argument("--workloads", default="natural,copy")
    p.add_argument("--rounds", type=int, default=2, help="side-by-side rounds (default 2)")
    p.add_argument("--db-dir", default=None, help="where the studies' SQLite files go (temp)")
    p.add_argument("--out", default=str(REPO / "experiments" / "results" / "llamacpp.md"))
    args = p.parse_args()
    log.setup("INFO")
    base = load_config(args.config)
    db_dir = Path(args.db_dir or tempfile.mkdtemp(prefix="autotune-llamacpp-"))
    rows = []
    for workload in args.workloads.split(","):
        cfg = _for_workload(base, workload, db_dir)
        started = time.monotonic()
        summary = loop.run_study(cfg)
        wall = time.monotonic() - started
        study = st.open_study(cfg, create=False)
        best = st.best_trials(study)
        if not best:
            print(f"{workload}: no feasible trial", file=sys.stderr)
            return 1
        winner = st.trial_config(best[0])
        deployed = _deployed(study)
        finalist_runs = _finalist_runs(study)
        side = _side_by_side(cfg, winner, args.rounds)
        rows.append(
            {
                "workload": workload,
                "winner": winner,
                "deployments": deployed,
                "finalist_runs": finalist_runs,
                "trials": summary.finished,
                "wall_s": wall,
                "per_deployment_s": wall / max(deployed + finalist_runs, 1),
                **side,
            }
        )
    text = _table(base, rows, args.rounds)
    Path(args.out).write_text(text)
    print(text)
    return 0


def _for_workload(base: Config, workload: str, db_dir: Path) -> Config:
    study = replace(
        base.study,
        name=f"llamacpp-{workload}",
        storage=f"sqlite:///{db_dir / f'llamacpp-{workload}.db'}",
        on_finish="stop",
    )
    return replace(base, study=study, benchmark=replace(base.benchmark, workload=workload))


def _deployed(study: Any) -> int:
    return sum(
        1
        for t in study.get_trials(deepcopy=False)
        if t.state.is_finished() and t.user_attrs.get("reused_from") is None
    )


def _finalist_runs(study: Any) -> int:
    return int((study.user_attrs.get(finalists.FINALISTS) or {}).get("runs") or 0)


def _side_by_side(cfg: Config, winner: dict[str, Any], rounds: int) -> dict[str, Any]:
    """Winner and no speculation, interleaved: value and per-level tok/s of each run."""
    deployer = deployment.deployer_for(cfg)
    values: dict[str, list[float]] = {"winner": [], "none": []}
    levels: dict[str, list[dict[int, float]]] = {"winner": [], "none": []}
    try:
        deployer.preflight()
        pipeline = TrialPipeline(
            cfg, deployer, get_engine(cfg.target.engine), deployer.original_unit()
        )
        for _ in range(rounds):
            for name, config in (("winner", winner), ("none", NONE)):
                result = pipeline.run(dict(config), lambda _c: None)
                values[name].append(result.score.values[0] if result.score.feasible else 0.0)
                levels[name].append(
                    {lv["concurrency"]: lv["output_throughput"] for lv in result.levels}
                )
    finally:
        deployer.close()
    w, n = statistics.median(values["winner"]), statistics.median(values["none"])
    per_level = {
        c: (
            statistics.median(run[c] for run in levels["winner"]),
            statistics.median(run[c] for run in levels["none"]),
        )
        for c in cfg.benchmark.concurrency
    }
    return {"winner_value": w, "none_value": n, "gain": w / n if n else float("nan"),
            "per_level": per_level, "runs": values}  # fmt: skip


def _flags(config: dict[str, Any]) -> str:
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in config.items())


def _table(cfg: Config, rows: list[dict[str, Any]], rounds: int) -> str:
    levels = cfg.benchmark.concurrency
    b = cfg.benchmark
    lines = [
        "# Tuning llama.cpp's llama-server on this CPU",
        "",
        f"`make llamacpp` ({time.strftime('%Y-%m-%d')}): {cfg.study.n_trials} trials per "
        f"workload, levels {list(levels)}, max_tokens {b.max_tokens}, windows "
        f"{b.min_duration:g}-{b.max_duration:g} s at ±{(b.ci_width or 0):.0%}; "
        "gemma3-270m Q4_K_M, 2 threads, 4 slots. "
        f"Gain: winner vs `--spec-type none`, median of {rounds} interleaved runs each.",
        "",
        "| workload | winner | geomean tok/s | none | gain | "
        + " | ".join(f"c={c} winner / none" for c in levels)
        + " | deployments | wall | per deployment |",
        "|---|---|---|---|---|" + "---|" * len(levels) + "---|---|---|",
    ]
    for r in rows:
        cells = [
            r["workload"],
            f"`{_flags(r['winner'])}`",
            f"{r['winner_value']:.1f}",
            f"{r['none_value']:.1f}",
            f"{r['gain']:.2f}x",
            *(f"{r['per_level'][c][0]:.1f} / {r['per_level'][c][1]:.1f}" for c in levels),
            f"{r['deployments']} + {r['finalist_runs']} finalist runs",
            f"{r['wall_s'] / 60:.1f} min",
            f"{r['per_deployment_s']:.0f} s",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Wall: the study, baseline and finalists included (not the side-by-side runs); "
        "per deployment: wall / (trials deployed + finalist runs): model load, warm-up, "
        "both levels and any level measured twice.",
        "",
        "Runs (geomean tok/s, in order): "
        + "; ".join(
            f"{r['workload']}: winner {[round(v, 1) for v in r['runs']['winner']]}, "
            f"none {[round(v, 1) for v in r['runs']['none']]}"
            for r in rows
        ),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
