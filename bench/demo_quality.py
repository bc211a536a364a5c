"""How good is the demo's answer? The best trial of a study against the simulator's true optimum.

    .venv/bin/python bench/demo_quality.py [--config examples/demo.yaml] [--storage URL]

Scores every config of the study's search space with the simulator's
noise-free model, under the study's own objective and constraints, and
reports the best trial's true value as a share of the true optimum.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune import study as st  # noqa: E402
from autotune import truth  # noqa: E402
from autotune.config import load_config  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(REPO / "examples" / "demo.yaml"))
    p.add_argument("--storage", help="override study.storage")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    cfg = load_config(args.config)
    if args.storage:
        cfg = replace(cfg, study=replace(cfg.study, storage=args.storage))
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
    if args.json:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            print(f"{k:>17}: {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
