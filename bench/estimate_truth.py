"""The estimate after the first trial against the study's real wall time.

    .venv/bin/python bench/estimate_truth.py [--only demo|llama]

Runs the demo study (`autotune start --demo`, the simulated SGLang four times faster than
real time) and the real llama-server example (examples/llamacpp-local.yaml) from scratch
in a temporary folder, reads the worker's JSON log, and compares the time left it
announced after the first measured trial (`time left: …`, `left_s`) with the time the
study then really took to its end. Writes bench/results/estimate_truth.md. Never run it
beside a build or the test suite: both are wall-clock measurements.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
AUTOTUNE = [sys.executable, "-m", "autotune", "--log-format", "json"]


def _stamp(line: dict) -> float:
    return datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()


def run(name: str, argv: list[str], cwd: Path) -> dict[str, Any]:
    started = time.time()
    proc = subprocess.run(
        [*AUTOTUNE, *argv], cwd=cwd, capture_output=True, text=True, env={**os.environ}
    )
    ended = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"{name}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    lines = []
    for raw in proc.stderr.splitlines():
        try:
            lines.append(json.loads(raw))
        except json.JSONDecodeError:
            continue
    said = [x for x in lines if str(x.get("event", "")).startswith("time left:")]
    first = said[0]
    said_at = _stamp(first)
    return {
        "study": name,
        "total_s": ended - started,
        "first_said_s": said_at - started,
        "predicted_left_s": float(first["left_s"]),
        "real_left_s": ended - said_at,
        "sentence": first["event"],
        # Every estimate of the night against the truth, and what each trial cost by kind:
        # the evidence for the estimate's rule (bench/results/raw/estimate_truth.jsonl).
        "estimates": [
            {
                "at_s": round(_stamp(x) - started),
                "left_s": x["left_s"],
                "real_left_s": round(ended - _stamp(x)),
            }
            for x in said
        ],
        "trials": _trial_costs(cwd),
        # The finalists are measured again after the trials, outside any trial's time.
        "finalist_runs_at_s": [
            round(_stamp(x) - started) for x in lines if x.get("event") == "finalist"
        ],
        "finalists_judged_at_s": [
            round(_stamp(x) - started) for x in lines if x.get("event") == "finalists judged"
        ],
    }


def _trial_costs(folder: Path) -> list[dict[str, object]]:
    """Per trial: wall seconds, the model load (`startup_s`), the levels' windows."""
    import optuna

    out: list[dict[str, object]] = []
    for db in sorted(folder.glob("*.db")):
        url = f"sqlite:///{db}"
        for summary in optuna.get_all_study_summaries(url):
            study = optuna.load_study(study_name=summary.study_name, storage=url)
            for t in study.trials:
                took = (
                    (t.datetime_complete - t.datetime_start).total_seconds()
                    if t.datetime_start and t.datetime_complete
                    else None
                )
                levels = t.user_attrs.get("levels") or []
                out.append(
                    {
                        "number": t.number,
                        "state": t.state.name,
                        "wall_s": took,
                        "startup_s": t.user_attrs.get("startup_s"),
                        "windows_s": [lv.get("window_s") for lv in levels],
                        "reused_from": t.user_attrs.get("reused_from"),
                        "failure": t.user_attrs.get("failure"),
                        "baseline": bool(t.user_attrs.get("baseline")),
                        "accept_length": t.user_attrs.get("accept_length"),
                        "rehearsal_speedup": t.user_attrs.get("rehearsal_speedup"),
                    }
                )
    return out


def _kept(row: dict[str, Any]) -> dict[str, Any]:
    """Appended to the raw file as soon as the study ends (a later one may be killed)."""
    raw = REPO / "bench" / "results" / "raw" / "estimate_truth.jsonl"
    stamp = datetime.now().isoformat(timespec="seconds")
    with raw.open("a") as f:
        f.write(json.dumps({"date": stamp, **row}, default=str) + "\n")
    return row


def _stop_the_winner(port: int) -> None:
    sys.path.insert(0, str(REPO))
    from autotune.deploy import ports

    for holder in ports.holders(port):
        if holder.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(holder.pid, signal.SIGTERM)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("demo", "llama"))
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "demo"):
            demo = Path(tmp) / "demo"
            demo.mkdir()
            rows.append(_kept(run("demo (examples/demo.yaml)", ["start", "--demo"], demo)))
        if args.only in (None, "llama"):
            config = REPO / "examples" / "llamacpp-local.yaml"
            argv = ["start", "--config", str(config), "--storage", f"sqlite:///{tmp}/llama.db"]
            try:
                name = "llama-server (examples/llamacpp-local.yaml)"
                rows.append(_kept(run(name, argv, Path(tmp))))
            finally:
                _stop_the_winner(8091)  # the example's on_finish: apply-best leaves it serving
    out = REPO / "bench" / "results" / "estimate_truth.md"
    text = [
        "# The estimate after the first trial, against the study's real wall time\n",
        f"Generated by `bench/estimate_truth.py{' --only ' + args.only if args.only else ''}` "
        f"on {os.cpu_count()} cores, each study from scratch. `predicted` is `left_s` of the "
        "worker's first `time left:` line (after the first measured trial); `real` is the "
        "time from that line to the end of `autotune start` (finalists and the end of the "
        "study included).\n",
        "| study | whole study | first estimate at | predicted left | real left | error |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        err = float(r["predicted_left_s"]) / float(r["real_left_s"]) - 1
        text.append(
            f"| {r['study']} | {r['total_s']:.0f} s | {r['first_said_s']:.0f} s | "
            f"{r['predicted_left_s']:.0f} s | {r['real_left_s']:.0f} s | {err:+.0%} |"
        )
    text += ["", "The first estimate each study printed:", ""]
    text += [f"- {r['study']}: `{r['sentence']}`" for r in rows]
    out.write_text("\n".join(text) + "\n")
    print(out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
