"""Static, SGLang's default adaptive, or adaptive with the study's per-load winners?

    .venv/bin/python experiments/adaptive_vs_static.py
        [--cells qwen:natural,llama:natural,deepseek:natural,qwen:greedy] [--trials 12]
        [--out experiments/results/adaptive_vs_static.md]

For each simulator profile and workload: a study on search_spaces/sglang-adaptive.yaml
(1, 16 and 64 clients, geomean) through the real CLI against the served simulator,
then `autotune export-adaptive --measure`. Reports the measured tok/s per level of the
static winner, the best adaptive trial, SGLang's default adaptive config and the
exported one, next to the simulator's noise-free values of the same configs
(`--predict`'s model), so a win inside the measurement noise shows as such.
Run it on an idle machine: it measures wall-clock throughput.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.sim import model  # noqa: E402
from autotune.sim.profiles import get_profile  # noqa: E402
from autotune.testservers.ports import free_port as _free_port  # noqa: E402

LEVELS = (1, 16, 64)
MAX_TOKENS = 128
#: Seconds per level of the changing-load phase (c=1→16→64→16→1) that the declared best
#: (as a finalist) and both probes run.
PHASE_SEGMENT_S = 8.0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cells", default="qwen:natural,llama:natural,deepseek:natural,qwen:greedy")
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--out", default=str(REPO / "experiments" / "results" / "adaptive_vs_static.md"))
    args = p.parse_args()
    sections = []
    started = time.monotonic()
    for item in args.cells.split(","):
        profile, _, workload = item.partition(":")
        print(f"== {profile} {workload}", file=sys.stderr, flush=True)
        sections.append(cell(profile, workload or "natural", args.trials))
    text = (
        "# Static or adaptive speculation, per load (`experiments/adaptive_vs_static.py`)\n\n"
        f"{args.trials} trials per study on `search_spaces/sglang-adaptive.yaml`, levels "
        f"{', '.join(map(str, LEVELS))}, geomean objective, {MAX_TOKENS} output tokens, "
        "the served simulator (noise 2 %), then `autotune export-adaptive --measure`. "
        "Measured tok/s, and in brackets the simulator's noise-free value of the same "
        f"config. {time.monotonic() - started:.0f} s in all.\n\n" + "\n".join(sections)
    )
    Path(args.out).write_text(text)
    print(text)
    return 0


def cell(profile: str, workload: str, trials: int) -> str:
    with tempfile.TemporaryDirectory(prefix="adaptive-bench-") as tmp:
        folder = Path(tmp)
        config = _study(folder, profile, workload, trials)
        run = _cli("start", config)
        export = _cli("export-adaptive", config, "--measure")
        status = json.loads(_cli("status", config, "--json").stdout)
        study = _study_attrs(folder)
    rows = study["rows"]
    exported = study["export"]["config"]
    truth = _truth(profile, workload, rows, exported)
    head = (
        f"## {profile}, {workload}\n\n"
        f"Exported: `{json.dumps(exported)}`; max_running_requests: static winners "
        f"{truth['static_mrr']}, SGLang default {truth['default_mrr']}, exported "
        f"{truth['exported_mrr']}. {len(status['trials'])} trials "
        f"({sum(1 for t in status['trials'] if t['config'].get('speculative_adaptive'))} "
        "adaptive).\n\n"
        "| level | static winner (steps) | best adaptive trial | SGLang default adaptive | "
        "exported adaptive | best measured (within 2 %) | best noise-free |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        c = r["concurrency"]
        t = truth["levels"][c]
        measured = {k: r[k] for k in ("static", "adaptive", "default", "exported") if r[k]}
        best = _leaders(measured, 0.02)
        best_true = _leaders({k: v for k, v in t.items() if v}, 0.005)
        lines.append(
            f"| c={c} | {_v(r['static'])} ({r['static_steps']}) [{_v(t['static'])}] | "
            f"{_v(r['adaptive'])} ({r['adaptive_candidates']}) [{_v(t['adaptive'])}] | "
            f"{_v(r['default'])} [{_v(t['default'])}] | {_v(r['exported'])} "
            f"[{_v(t['exported'])}] | {best} | {best_true} |"
        )
    del run, export
    return head + "\n".join(lines) + "\n\n" + _phase_table(study["phases"]) + "\n"


def _phase_table(phases: dict[str, Any]) -> str:
    if not phases:
        return "Changing-load phase: not measured.\n"
    levels = "→".join(map(str, next(iter(phases.values()))["levels"]))
    head = (
        f"Through the changing-load phase (c={levels}, {PHASE_SEGMENT_S:g} s each):\n\n"
        "| config | tok/s through the phase | per segment (steady part) | tier switches "
        "(steady, /min) | stalls | verdict |\n|---|---|---|---|---|---|\n"
    )
    rows = []
    for label, p in phases.items():
        segs = " · ".join(f"{s['output_throughput']:,.0f}" for s in p["segments"])
        per_min = p.get("switches_per_min_steady")
        verdict = "held up" if p["held_up"] else "did not hold up: " + "; ".join(p["problems"])
        rows.append(
            f"| {label} | {p['output_throughput']:,.0f} | {segs} | {len(p['switches'])}"
            f"{'' if per_min is None else f' ({per_min:g})'} | {p['stalls']} | {verdict} |"
        )
    return head + "\n".join(rows) + "\n"


def _leaders(values: dict[str, float], within: float) -> str:
    """The best, and every other within `within` of it (measured: the noise; noise-free: ties)."""
    if not values:
        return "—"
    top = max(values.values())
    return ", ".join(k for k, v in values.items() if v >= top * (1 - within))


def _v(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f}"


def _study(folder: Path, profile: str, workload: str, trials: int) -> Path:
    port = _free_port()
    (folder / "sim.service").write_text(
        "[Service]\nType=simple\n"
        f"ExecStart={sys.executable} -m autotune.sim --host 127.0.0.1 --port {port} "
        "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
        f"--speculative-num-draft-tokens 4 --max-running-requests 64 --sim-profile {profile} "
        "--sim-load-time 0.2\n"
    )
    config = {
        "study": {"name": "adaptive", "storage": f"sqlite:///{folder / 'study.db'}",
                  "n_trials": trials, "seed": 1},
        "target": {"unit_file": "sim.service", "base_url": f"http://127.0.0.1:{port}",
                   "ready_timeout": 60},
        "search_space": "sglang-adaptive.yaml",
        "benchmark": {"concurrency": list(LEVELS), "workload": workload,
                      "max_tokens": MAX_TOKENS, "min_duration": 2.0, "max_duration": 5.0,
                      "finalists": 2, "finalist_rounds": 1,
                      "load_phase_segment": PHASE_SEGMENT_S},
        "objective": {"mode": "geomean"},
    }  # fmt: skip
    path = folder / "autotune.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _cli(*args: Any) -> subprocess.CompletedProcess[str]:
    verb, config, *rest = args
    proc = subprocess.run(
        [sys.executable, "-m", "autotune", verb, "--config", str(config), *rest],
        capture_output=True,
        text=True,
        cwd=Path(config).parent,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"autotune {verb} failed:\n{proc.stderr[-3000:]}")
    return proc


def _study_attrs(folder: Path) -> dict[str, Any]:
    from autotune.config import load_config
    from autotune.export import phases, sglang_adaptive
    from autotune.search import study as st

    cfg = load_config(str(folder / "autotune.yaml"))
    study = st.open_study(cfg, create=False)
    return {
        "rows": sglang_adaptive.comparison(cfg, study),
        "export": study.user_attrs["adaptive_export"],
        "phases": phases.phases(
            study, study.user_attrs.get(sglang_adaptive.PROBES) or {}, every_finalist=True
        ),
    }


def _truth(
    profile_name: str, workload: str, rows: list[dict[str, Any]], exported: dict[str, Any]
) -> dict[str, Any]:
    """The simulator's noise-free tok/s of the configs the measured table names."""
    profile = get_profile(profile_name)
    base = {"speculative_algorithm": "EAGLE", "max_running_requests": 64}

    def resolve(**kw: Any) -> model.Resolved:
        r = model.resolve(profile, model.Launch(**{**base, **kw}))
        assert isinstance(r, model.Resolved), r
        return r

    def tok_s(r: model.Resolved, c: int) -> float:
        out = model.predict_level(profile, r, c, workload, MAX_TOKENS, 72)
        return float(out["output_throughput"])

    default = resolve(speculative_adaptive=True)
    text = json.dumps(exported)
    # As the probe runs it: no --speculative-num-steps, so each range starts at its own.
    export = resolve(speculative_adaptive=True, speculative_adaptive_config="x.json",
                     adaptive_config_text=text)  # fmt: skip
    levels: dict[int, dict[str, float | None]] = {}
    static_mrr = []
    for r in rows:
        c = r["concurrency"]
        static = adaptive_t = None
        if r["static_steps"]:
            s = resolve(speculative_num_steps=int(r["static_steps"]), speculative_eagle_topk=1,
                        speculative_num_draft_tokens=int(r["static_steps"]) + 1)  # fmt: skip
            static = tok_s(s, c)
            static_mrr.append(s.max_running_requests)
        cands = r["adaptive_candidates"]
        if cands and cands != "default":
            a = resolve(speculative_adaptive=True, speculative_adaptive_config="y.json",
                        adaptive_config_text=json.dumps({"1": {"candidate_steps": [
                            int(x) for x in cands.split(",")]}}))  # fmt: skip
            adaptive_t = tok_s(a, c)
        elif cands == "default":
            adaptive_t = tok_s(default, c)
        levels[c] = {
            "static": static,
            "adaptive": adaptive_t,
            "default": tok_s(default, c),
            "exported": tok_s(export, c),
        }
    return {
        "levels": levels,
        "static_mrr": sorted(set(static_mrr)),
        "default_mrr": default.max_running_requests,
        "exported_mrr": export.max_running_requests,
    }


if __name__ == "__main__":
    raise SystemExit(main())
