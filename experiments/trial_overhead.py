"""Seconds a study spends between trials and on noticing a crash: the real CLI on the simulator.

    .venv/bin/python experiments/trial_overhead.py [--trials 10]

Two studies through `autotune --log-format json start` on the simulator
(deploy: local-process, the demo's unit and space, SQLite), timed from
autotune's own log:

- between trials: from a trial's end ("trial done", "trial pruned",
  "predicted infeasible") to the next "deploying": recording the result and
  its files, the model's pick, the time estimate, the proposal (the GP), the
  level plan and the capacity check. On a GPU host the GPUs idle meanwhile.
- crash detection: every start crashes after serving 5 requests
  (`--sim-fault crash-after:5`); a thread here watches the server's process
  (its pid file) and stamps the moment it is gone; the lag is from then to
  autotune's "server failed during benchmark".

Writes experiments/results/trial_overhead.md. Run on an idle machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.testservers.ports import free_port  # noqa: E402
from autotune.testservers.sim_unit import sim_unit  # noqa: E402

#: The last thing a trial does on the server: a level measured, the trial stopped early,
#: found infeasible without a benchmark, or failed.
ENDS = (
    "level done",
    "pruned: cannot plausibly beat the best so far",
    "infeasible: not benchmarked",
    "server failed",
    "server failed during benchmark",
)
RESULTS = REPO / "experiments" / "results" / "trial_overhead.md"


def study(folder: Path, trials: int, fault: str | None) -> tuple[list[dict[str, Any]], list[float]]:
    """Run one study; its JSON log lines, and the wall times the server processes died."""
    port = free_port()
    sim_flags = "--sim-load-time 1.0" + (f" --sim-fault {fault}" if fault else "")
    (folder / "sim.service").write_text(sim_unit(port, "", sim_flags))
    demo = yaml.safe_load((REPO / "examples" / "demo.yaml").read_text())
    demo["study"].update(storage=f"sqlite:///{folder / 'study.db'}", n_trials=trials)
    demo["target"].update(unit_file="sim.service", base_url=f"http://127.0.0.1:{port}")
    demo["search_space"] = str(REPO / "search_spaces" / "sglang-eagle.yaml")
    demo["benchmark"]["finalists"] = 0
    if fault:
        # Every config benchmarked (no capacity floor), so every start reaches its crash.
        demo["objective"] = {"mode": "geomean"}
    (folder / "autotune.yaml").write_text(yaml.safe_dump(demo, sort_keys=False))
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "--log-format", "json", "start", "--config",
         str(folder / "autotune.yaml")],
        cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deaths: list[float] = []
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(folder, deaths, done), daemon=True)
    watcher.start()
    try:
        _, err = proc.communicate(timeout=1800)
    finally:
        done.set()
        if proc.poll() is None:
            proc.kill()
    if proc.returncode != 0:
        raise RuntimeError(f"autotune start failed:\n{err[-3000:]}")
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    return lines, deaths


def _watch(folder: Path, deaths: list[float], done: threading.Event) -> None:
    """Stamp each server process's death: gone, or a zombie its parent has not reaped yet."""
    seen: set[int] = set()
    alive: int | None = None
    while not done.is_set():
        for pidfile in folder.rglob("*.pid"):
            try:
                pid = int(pidfile.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            if pid not in seen:
                seen.add(pid)
                alive = pid
        if alive is not None and not _running(alive):
            deaths.append(time.time())
            alive = None
        time.sleep(0.005)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _t(line: dict[str, Any]) -> float:
    return dt.datetime.fromisoformat(line["timestamp"].replace("Z", "+00:00")).timestamp()


def gaps(lines: list[dict[str, Any]]) -> list[float]:
    """Seconds from the end of each trial's work on the server to the next deploy (configs
    answered without a server in between included: the GPUs idle through them too)."""
    out = []
    end: float | None = None
    for line in lines:
        if line.get("event") in ENDS:
            end = _t(line)
        elif line.get("event") == "deploying" and end is not None:
            out.append(_t(line) - end)
            end = None
    return out


#: The watcher polls every 5 ms and autotune may reap the process first: a death stamped
#: this long after autotune's verdict is still the one it found.
STAMP_SLACK_S = 0.05


def detection(lines: list[dict[str, Any]], deaths: list[float]) -> list[float]:
    """Seconds from each server's death to autotune's verdict on it."""
    failed = [_t(x) for x in lines if x.get("event") == "server failed during benchmark"]
    out = []
    for f in failed:
        near = [d for d in deaths if d <= f + STAMP_SLACK_S]
        if near:
            out.append(max(0.0, f - near[-1]))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trials", type=int, default=10)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="autotune-trial-overhead-") as tmp:
        (Path(tmp) / "plain").mkdir()
        (Path(tmp) / "crash").mkdir()
        lines, _ = study(Path(tmp) / "plain", args.trials, None)
        between = gaps(lines)
        crash_lines, deaths = study(Path(tmp) / "crash", args.trials // 2, "crash-after:5")
        lag = detection(crash_lines, deaths)
    lines_md = [
        "# Trial overhead: between trials, and noticing a crash",
        "",
        "Generated by `experiments/trial_overhead.py`: `autotune start` (JSON log, local-process "
        "deploy, SQLite) on the simulator with the demo's unit, space and objective.",
        "",
        "| what | n | median s | max s | goal |",
        "|---|---|---|---|---|",
        f"| trial end to next deploying | {len(between)} | {_med(between)} | {_max(between)} "
        "| < 2 s |",
        f'| server exit to "server failed during benchmark" | {len(lag)} | {_med(lag)} '
        f"| {_max(lag)} | < 5 s |",
        "",
        "Between trials: from the last level (or the verdict) of one trial to the next "
        "deploy: the result and its files written, the model's pick, the time estimate, the "
        "next proposal (GP over the space), its level plan (one GP per level) and the "
        "capacity check, and any config answered in between without a server. Crash: every "
        "start crashes after 5 requests (no capacity floor, so every config is benchmarked; "
        "each is "
        "deployed twice: a crash is confirmed by one redeploy); the exit is stamped from "
        "/proc by this script every 5 ms (autotune may reap it first: a stamp up to 50 ms after "
        "its verdict counts as 0).",
        "",
    ]
    text = "\n".join(lines_md)
    RESULTS.write_text(text)
    print(text)
    return 0


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f}" if xs else "—"


def _max(xs: list[float]) -> str:
    return f"{max(xs):.2f}" if xs else "—"


if __name__ == "__main__":
    raise SystemExit(main())
