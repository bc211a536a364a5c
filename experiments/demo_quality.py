"""How good is the demo's answer? The best trial of a study against the simulator's true optimum.

    .venv/bin/python experiments/demo_quality.py [--config examples/demo.yaml] [--storage URL]
    .venv/bin/python experiments/demo_quality.py --runs 10      # 10 fresh `autotune start` demos
    .venv/bin/python experiments/demo_quality.py --replay 200   # the study in process, modelled

Scores every config of the study's search space with the simulator's
noise-free model, under the study's own objective and constraints, and
reports the best trial's true value as a share of the true optimum.

`--runs N` runs the demo N times from scratch, each in a fresh folder against
the real simulated server (`make run` without the make: about 2.5 minutes each),
and counts how often the declared best is the true optimum. `--replay N` plays
the same study N times in process against the simulator's model and noise
(`autotune/testservers/simulated.py`), seconds in all: for choosing settings, not
as the evidence.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune import log  # noqa: E402
from autotune.config import Config, load_config  # noqa: E402
from autotune.search import study as st  # noqa: E402
from autotune.sim import truth  # noqa: E402
from autotune.unit import unitfile  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(REPO / "examples" / "demo.yaml"))
    p.add_argument("--storage", help="override study.storage")
    p.add_argument("--json", action="store_true")
    p.add_argument("--runs", type=int, help="run the demo this many times, fresh each time")
    p.add_argument("--parallel", type=int, default=1, help="with --runs: demos at once")
    p.add_argument("--replay", type=int, help="play the study this many times in process")
    args = p.parse_args()
    if args.runs:
        return fresh_runs(args.runs, args.config, args.parallel)
    cfg = load_config(args.config)
    if args.replay:
        return replay(cfg, args.replay)
    if args.storage:
        cfg = replace(cfg, study=replace(cfg.study, storage=args.storage))
    return grade(cfg, as_json=args.json)


def grade(cfg: Config, *, as_json: bool) -> int:
    table = truth.study_truth(cfg, cfg.target.unit_file.read_text())
    best_true = truth.optimum(table)
    by_config = {tuple(sorted((t.resolved or t.config).items())): t for t in table}

    study = st.open_study(cfg, create=False)
    found = st.best_trials(study)
    if not found:
        print("the study has no feasible trial", file=sys.stderr)
        return 1
    trial = found[0]
    config = st.trial_config(trial)
    key = tuple(sorted((k, config[k]) for k in cfg.space.params))
    mine = by_config.get(key)
    if mine is None:
        print(f"trial {trial.number}'s config {config} is not in the search space", file=sys.stderr)
        return 1
    ratio = mine.value / best_true.value if mine.feasible else 0.0
    trials = study.get_trials(deepcopy=False)
    report = {
        "study": cfg.study.name,
        "trials": len(trials),
        "deployed": sum(1 for t in trials if t.user_attrs.get("reused_from") is None),
        "best_trial": trial.number,
        "best_config": config,
        "best_measured": trial.value,
        "best_true": round(mine.value, 2),
        "optimum_config": best_true.resolved,
        "optimum_true": round(best_true.value, 2),
        "ratio": round(ratio, 4),
        "feasible_configs": sum(t.feasible for t in table),
        "configs": len(table),
    }
    if as_json:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            print(f"{k:>17}: {v}")
    return 0


def fresh_runs(n: int, config: str, parallel: int = 1) -> int:
    """`autotune start` on the demo config N times, each in an empty folder; grade each.

    With `parallel` > 1 that many demos run at once, each on its own port (2 on a
    2-core machine: a demo's server and client use under a core together).
    """
    with ThreadPoolExecutor(parallel) as pool:
        results = list(pool.map(lambda i: _fresh_run(i, config, 30000 + i), range(1, n + 1)))
    hits = sum(r["ratio"] >= 1.0 - 1e-9 for r in results)
    print(f"declared the true optimum in {hits} of {n} fresh runs")
    return 0


def _fresh_run(i: int, config: str, port: int) -> dict[str, Any]:
    src = Path(config).resolve()
    with tempfile.TemporaryDirectory(prefix="demo-quality-") as tmp:
        unit = (src.parent / "sglang-sim.service").read_text()
        unit = unit.replace("--port 30000", f"--port {port}")
        (Path(tmp) / "sglang-sim.service").write_text(unit)
        space = (src.parent / "../search_spaces/sglang-eagle.yaml").resolve()
        text = src.read_text().replace("../search_spaces/sglang-eagle.yaml", str(space))
        (Path(tmp) / src.name).write_text(text.replace(":30000", f":{port}"))
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "autotune", "--log-format", "json", "start", "--config",
             src.name],
            cwd=tmp, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        out = subprocess.run(
            [sys.executable, __file__, "--config", str(Path(tmp) / src.name), "--json"],
            cwd=tmp, check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
    r: dict[str, Any] = json.loads(out)
    r = {"run": i, "minutes": round((time.monotonic() - started) / 60, 1), **r}
    print(json.dumps(r), flush=True)
    return r


def replay(cfg: Config, n: int) -> int:
    """The demo's study (its sampler, budget, finalists) against the model plus noise."""
    from autotune.run import finalists
    from autotune.testservers.in_memory import in_memory_study, run_to
    from autotune.testservers.landscape import Landscape
    from autotune.testservers.simulated import SimulatedServer

    log.setup("ERROR")
    unit = cfg.target.unit_file.read_text()
    table = truth.study_truth(cfg, unit)
    land = Landscape(cfg, {cfg.space.key(t.config): t for t in table}, truth.optimum(table))
    flags = unitfile.flags(unitfile.parse_exec_start(unit).argv)
    hits, runs = 0, 0
    for seed in range(n):
        # The study's own seed, as every `make run` has; only the server's noise differs.
        run_cfg = cfg
        study = in_memory_study(run_cfg, st.make_sampler(run_cfg))
        baseline = st.baseline_of(cfg.space, flags)
        st.enqueue_baseline_once(study, baseline)
        server = SimulatedServer(land, random.Random(f"demo/{seed}"))
        run_to(run_cfg, study, server, baseline, cfg.study.n_trials)
        before = len(server.deployed)
        declared = finalists.validate(run_cfg, study, lambda p, s=server: s(p, lambda _c: None))
        runs += len(server.deployed) - before
        best = [study.trials[declared]] if declared is not None else st.best_trials(study)
        hits += bool(best) and land.ratio(st.trial_config(best[0])) >= 1.0 - 1e-9
    print(
        f"declared the true optimum in {hits} of {n} modelled runs "
        f"({100 * hits / n:.0f} %), {runs / n:.1f} finalist runs each"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
