"""Two real studies side by side on the real llama-server: the default against no model.

    .venv/bin/python experiments/llamacpp_pair.py [--workload natural] [--n-trials 10] [--rounds 2]
    .venv/bin/python experiments/llamacpp_pair.py --workload copy --warm-from natural [--seed 2]

With `--warm-from W` the two studies on the workload are the default cold and the default
`start --from` the default's study on W (its SQLite file here; run first, with
`--earlier-trials` deployments, where it is not there yet): a warm start when the traffic
moved, on a real server, beside the cold study of the same workload. `--seed N` runs
another pair of studies (their names and rows carry the seed) beside the config's own.

Runs examples/llamacpp-local.yaml twice on one workload, same space, levels and seed: once
as shipped (`sampler: auto`, the GP; the performance model is off on an n-gram space, which
has no draft chain) and once with `sampler: random` (no model at all). Then each study's
declared best is deployed again, interleaved (A, B, A, B, ...), so the two winners are
compared on measurements taken in the same minutes. Every deployment is also valued by the
recorded sweep (`experiments/results/raw/llamacpp-sweep.jsonl`, the replay cell's landscape): how
far into the study a config worth 98 % of the recorded optimum was first deployed, and what
the declared best is worth there.

Each study lives in its own SQLite file under `experiments/results/raw/llamacpp-pair/` (open it
with optuna-dashboard); a killed run resumes the study where it stopped. Results are
appended to `experiments/results/raw/llamacpp-pair.jsonl` and the table is written to
`experiments/results/llamacpp-pair.md`. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
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
from autotune.search import warm_start  # noqa: E402
from experiments.efficiency import replay  # noqa: E402
from experiments.efficiency.cells import Cell, landscape  # noqa: E402

RAW = REPO / "experiments" / "results" / "raw" / "llamacpp-pair.jsonl"
DB_DIR = REPO / "experiments" / "results" / "raw" / "llamacpp-pair"
OUT = REPO / "experiments" / "results" / "llamacpp-pair.md"
#: The two studies: the default, and the same study with no model of the landscape at all.
ARMS = {"default": "auto", "no-model": "random"}
#: With --warm-from W: the default cold, and the default started from the default on W.
WARM_PREFIX = "from-"


def sampler_of(arm: str) -> str:
    return "auto" if arm.startswith(WARM_PREFIX) else ARMS[arm]


def study_config(
    base: Config, workload: str, arm: str, n_trials: int, seed: int | None = None
) -> Config:
    """The arm's study; `seed` other than the config's names a study of its own."""
    name = f"pair-{workload}-{arm}" + (f"-s{seed}" if seed not in (None, base.study.seed) else "")
    study = replace(
        base.study,
        name=name,
        storage=f"sqlite:///{DB_DIR / f'{name}.db'}",
        sampler=sampler_of(arm),
        n_trials=n_trials,
        on_finish="stop",
        seed=base.study.seed if seed is None else seed,
    )
    return replace(base, study=study, benchmark=replace(base.benchmark, workload=workload))


def start_from(cfg: Config, earlier: Config) -> None:
    """What `autotune start --from` does before the first deployment (once: a resumed study
    keeps its record)."""
    checked, where = warm_start.checked(cfg, earlier.study.name, earlier.study.storage)
    declared = st.best_trials(checked)
    record = warm_start.of_study(cfg, checked, where, declared[0] if declared else None)
    st.record_warm_start_once(st.open_study(cfg), record)


def run_arm(cfg: Config, workload: str, arm: str, earlier: Config | None = None) -> dict[str, Any]:
    """The study (resumed if it was cut short), then what it deployed, valued two ways.
    A warm arm (`from-W`) starts from `earlier`, the default's study on workload W."""
    started = time.monotonic()
    if arm.startswith(WARM_PREFIX):
        assert earlier is not None
        start_from(cfg, earlier)
    loop.run_study(cfg)
    wall = time.monotonic() - started
    study = st.open_study(cfg, create=False)
    land = landscape(Cell(replay.SPACE, replay.PROFILE, workload, "geomean"))
    deployed = [
        t
        for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
        if t.state.is_finished() and t.user_attrs.get("reused_from") is None and t.values
    ]
    best = st.best_trials(study)
    declared = st.trial_config(best[0]) if best else None
    shares = [land.ratio(st.trial_config(t)) for t in deployed]
    found = next((i + 1 for i, r in enumerate(shares) if r >= 0.98 - 1e-12), None)
    first = next((i + 1 for i, t in enumerate(deployed) if st.trial_config(t) == declared), None)
    return {
        "workload": workload,
        "arm": arm,
        "sampler": cfg.study.sampler,
        "seed": cfg.study.seed,
        "n_trials": cfg.study.n_trials,
        "deployments": [
            {"config": st.trial_config(t), "measured": t.values[0], "recorded_share": r}
            for t, r in zip(deployed, shares, strict=True)
        ],
        "finalist_runs": int((study.user_attrs.get(finalists.FINALISTS) or {}).get("runs") or 0),
        "declared": declared,
        "declared_estimate": best[0].values[0] if best else None,
        "declared_recorded_share": land.ratio(declared),
        "declared_first_deployed_at": first,
        "found_98_at": found,
        "recorded_optimum": land.best.value,
        "wall_s": round(wall, 1),
    }


def measure_again(cfg: Config, winners: dict[str, dict[str, Any]], rounds: int) -> dict[str, Any]:
    """Each arm's declared best deployed `rounds` more times, interleaved."""
    deployer = deployment.deployer_for(cfg)
    runs: dict[str, list[float]] = {arm: [] for arm in winners}
    try:
        deployer.preflight()
        pipeline = TrialPipeline(
            cfg, deployer, get_engine(cfg.target.engine), deployer.original_unit()
        )
        for _ in range(rounds):
            for arm, config in winners.items():
                result = pipeline.run(dict(config), lambda _c: None)
                runs[arm].append(result.score.values[0] if result.score.feasible else 0.0)
    finally:
        deployer.close()
    return runs


def _recorded(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _append(path: Path, row: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def table(rows: list[dict[str, Any]]) -> str:
    studies = [r for r in rows if "arm" in r]
    # A row from before --seed carries none: it belongs with the studies run before it.
    again = {(r["workload"], r.get("seed")): r for r in rows if "again" in r}
    lines = [
        "# The default against no model, on the real llama-server",
        "",
        "`experiments/llamacpp_pair.py`: examples/llamacpp-local.yaml run twice per workload, same "
        "space, levels and seed, once as shipped (GP; the performance model is off on an "
        "n-gram space) and once with `sampler: random`. Recorded share: a config's value in "
        "the recorded sweep (`experiments/results/raw/llamacpp-sweep.jsonl`) as a share of the "
        "recorded optimum. Measured again: each declared best deployed again, the two "
        "interleaved. A study `from-W` is the default started from the default's study on "
        "workload W (`--warm-from W`, as `autotune start --from`), beside the cold default.",
        "",
        "| workload | study | deployments (+ finalist runs) | 98 % of the recorded optimum "
        "first deployed at | declared best | its estimate | its recorded share | measured "
        "again | wall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in studies:
        row = again.get((r["workload"], r["seed"])) or again.get((r["workload"], None), {})
        runs = row.get("again", {}).get(r["arm"], [])
        flags = " ".join(f"{k}={v}" for k, v in (r["declared"] or {}).items())
        lines.append(
            f"| {r['workload']} | {r['arm']} (`{r['sampler']}`, seed {r['seed']}) "
            f"| {len(r['deployments'])} (+ {r['finalist_runs']}) "
            f"| {r['found_98_at'] or 'never'} | `{flags}` (deployment "
            f"{r['declared_first_deployed_at']}) | {r['declared_estimate']:.1f} "
            f"| {100 * r['declared_recorded_share']:.1f} % "
            f"| {', '.join(f'{v:.1f}' for v in runs) or '-'}"
            + (f" (median {statistics.median(runs):.1f})" if runs else "")
            + f" | {r['wall_s'] / 60:.1f} min |"
        )
    for r in studies:
        path = ", ".join(f"{100 * d['recorded_share']:.0f}" for d in r["deployments"])
        lines.append("")
        lines.append(
            f"- {r['workload']} {r['arm']} (seed {r['seed']}): recorded share of each "
            f"deployment, % : {path}"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(REPO / "examples" / "llamacpp-local.yaml"))
    p.add_argument("--workload", default="natural")
    p.add_argument("--n-trials", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2, help="runs of each declared best again")
    p.add_argument(
        "--warm-from",
        metavar="WORKLOAD",
        help="the default cold against the default started from its study on WORKLOAD",
    )
    p.add_argument("--seed", type=int, help="the studies' seed (default: the config's)")
    p.add_argument(
        "--earlier-trials",
        type=int,
        default=6,
        help="deployments of the earlier study, where --warm-from has to run it first",
    )
    args = p.parse_args()
    for w in (args.workload, args.warm_from):
        if w is not None and w not in replay.workloads():
            p.error(f"workload {w}: the sweep has not recorded it whole yet")
    if args.warm_from == args.workload:
        p.error("--warm-from names the workload the study runs on: give the other one")
    log.setup("INFO")
    DB_DIR.mkdir(parents=True, exist_ok=True)
    base = load_config(args.config)
    seed = base.study.seed if args.seed is None else args.seed
    arms = ["default", WARM_PREFIX + args.warm_from] if args.warm_from else list(ARMS)
    earlier = None
    if args.warm_from:
        earlier = study_config(base, args.warm_from, "default", args.earlier_trials, seed)
        if not (DB_DIR / f"{earlier.study.name}.db").exists():
            log.get("autotune").info("the earlier study first", study=earlier.study.name)
            loop.run_study(earlier)
    rows = _recorded(RAW)
    done = {
        r["arm"]
        for r in rows
        if r.get("workload") == args.workload and "arm" in r and r.get("seed") == seed
    }
    for arm in arms:
        if arm not in done:
            cfg = study_config(base, args.workload, arm, args.n_trials, seed)
            _append(RAW, run_arm(cfg, args.workload, arm, earlier))
    rows = _recorded(RAW)
    # A row from before --seed carries none: it ran at the config's seed.
    mine = [
        r
        for r in rows
        if r.get("workload") == args.workload and r.get("seed", base.study.seed) == seed
    ]
    if not any("again" in r for r in mine):
        winners = {r["arm"]: r["declared"] for r in mine if "arm" in r and r["declared"]}
        cfg = study_config(base, args.workload, "default", args.n_trials, seed)
        runs = measure_again(cfg, winners, args.rounds)
        _append(RAW, {"workload": args.workload, "seed": seed, "again": runs})
    text = table(_recorded(RAW))
    OUT.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
