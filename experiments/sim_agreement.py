"""Does the served simulator agree with its own `--predict`? And how much does a restart vary?

    .venv/bin/python experiments/sim_agreement.py [--starts 5] [--duration 6] [--json]
    .venv/bin/python experiments/sim_agreement.py --noise-sd --starts 10

Agreement: for a sample of configs of every profile, under both workloads, the
real simulator is started `--starts` times (seeds 1..N, `--sim-noise 0`, so the
only randomness left is the accepted-token draws and the reply lengths, as on a
real server) and measured by autotune's own benchmark client, run as a separate
process, at 1, 16 and 64 concurrent requests. Each cell prints the mean served
tokens/s over the starts against the noise-free prediction for the prompts the
client really sends. The tuner's answer is graded against that prediction, so a
gap here is a gap in the grade.

`--noise-sd`: one config started N times with the documented start noise
(`--sim-noise 0.02`); prints the SD of the served/predicted ratio per level.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune.sim import model  # noqa: E402
from autotune.sim.predict import benchmark_input_len  # noqa: E402
from autotune.sim.profiles import PROFILES, get_profile  # noqa: E402
from autotune.testservers.ports import free_port  # noqa: E402

LEVELS = (1, 16, 64)
#: Per profile: SGLang's own choice for the model; for the demo's profile also the
#: shortest chain and a wide tree.
SAMPLE = {
    "qwen3.5-122b-a10b-mtp": ((3, 1, 4), (1, 1, 2), (4, 4, 8)),
    "llama3.1-8b-eagle3-h100": ((5, 4, 8),),
    "deepseek-v3-mtp-8xh200": ((3, 1, 4),),
}


def launch_flags(profile: str, knobs: tuple[int, int, int]) -> list[str]:
    p = get_profile(profile)
    steps, topk, draft = knobs
    return [
        "--sim-profile", p.name,
        "--speculative-algorithm", p.default_algorithm,
        "--speculative-num-steps", str(steps),
        "--speculative-eagle-topk", str(topk),
        "--speculative-num-draft-tokens", str(draft),
    ]  # fmt: skip


def predicted(
    profile: str, knobs: tuple[int, int, int], workload: str, levels: tuple[int, ...] = LEVELS
) -> list[float] | None:
    p = get_profile(profile)
    steps, topk, draft = knobs
    launch = model.Launch(p.default_algorithm, steps, topk, draft)
    resolved = model.resolve(p, launch)
    if isinstance(resolved, model.Refusal) or resolved.late_failure is not None:
        return None
    n = benchmark_input_len(workload)
    return [
        float(model.predict_level(p, resolved, c, workload, 256, n)["output_throughput"])
        for c in levels
    ]


@contextlib.contextmanager
def served(flags: list[str]) -> Iterator[str]:
    """The simulator with `flags` on a free port, until /health answers; yields its URL."""
    port = free_port()
    sim = subprocess.Popen(
        [sys.executable, "-m", "autotune.sim", "--port", str(port), "--sim-load-time", "0.1",
         *flags],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or sim.poll() is not None:
                    raise RuntimeError(f"the simulator did not start: {flags}") from None
                time.sleep(0.1)
        yield url
    finally:
        sim.terminate()
        sim.wait(10)


def serve_and_measure(
    flags: list[str], workload: str, duration: float, levels: tuple[int, ...] = LEVELS
) -> list[float]:
    with served(flags) as url:
        out = subprocess.run(
            [sys.executable, "-m", "autotune", "bench", "--url", url, "--json",
             "--concurrency", ",".join(map(str, levels)), "--workload", workload,
             "--max-tokens", "256", "--min-duration", str(duration),
             "--max-duration", str(duration), "--ci-width", "0"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [float(r["output_throughput"]) for r in rows]


def agreement(starts: int, duration: float, profiles: list[str]) -> list[dict[str, Any]]:
    rows = []
    for profile in profiles:
        for n, knobs in enumerate(SAMPLE[profile]):
            for w, workload in enumerate(("greedy", "natural")):
                want = predicted(profile, knobs, workload)
                if want is None:
                    continue
                served = [
                    serve_and_measure(
                        # A seed per start and cell: the same seed would replay the same
                        # acceptance draws everywhere and correlate every cell's error.
                        [
                            *launch_flags(profile, knobs),
                            "--sim-noise",
                            "0",
                            "--sim-seed",
                            str(1000 * n + 100 * w + s + 7 * len(profile)),
                        ],
                        workload,
                        duration,
                    )
                    for s in range(1, starts + 1)
                ]
                means = [statistics.fmean(col) for col in zip(*served, strict=True)]
                row = {
                    "profile": profile,
                    "config": list(knobs),
                    "workload": workload,
                    "predicted": [round(x, 1) for x in want],
                    "served_mean": [round(x, 1) for x in means],
                    "error_pct": [
                        round(100 * (m / w - 1), 2) for m, w in zip(means, want, strict=True)
                    ],
                }
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def noise_sd(starts: int, duration: float) -> dict[str, Any]:
    profile, knobs, workload = "qwen3.5-122b-a10b-mtp", (3, 1, 4), "natural"
    want = predicted(profile, knobs, workload)
    assert want is not None
    ratios = [
        [
            s / w
            for s, w in zip(
                serve_and_measure(
                    [*launch_flags(profile, knobs), "--sim-noise", "0.02"], workload, duration
                ),
                want,
                strict=True,
            )
        ]
        for _ in range(starts)
    ]
    per_start = [statistics.fmean(r) for r in ratios]
    return {
        "config": list(knobs),
        "starts": starts,
        "sd_pct_per_level": [
            round(100 * statistics.stdev(c), 2) for c in zip(*ratios, strict=True)
        ],
        "sd_pct_of_start_mean": round(100 * statistics.stdev(per_start), 2),
        "per_start": [round(x, 4) for x in per_start],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--starts", type=int, default=5)
    p.add_argument("--duration", type=float, default=6.0, help="seconds of steady state a level")
    p.add_argument("--profile", action="append", help="default: all three")
    p.add_argument("--noise-sd", action="store_true")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.noise_sd:
        result = noise_sd(args.starts, args.duration)
        print(json.dumps(result))
        return 0
    rows = agreement(args.starts, args.duration, args.profile or list(PROFILES))
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"| profile | config | workload | {' | '.join(f'c={c}' for c in LEVELS)} |")
    print("|---|---|---|" + "---|" * len(LEVELS))
    for r in rows:
        cells = [
            f"{s:.0f} / {w:.0f} ({e:+.1f} %)"
            for s, w, e in zip(r["served_mean"], r["predicted"], r["error_pct"], strict=True)
        ]
        print(f"| {r['profile']} | {tuple(r['config'])} | {r['workload']} | {' | '.join(cells)} |")
    worst = max(abs(e) for r in rows for e in r["error_pct"])
    print(f"\nworst |served/predicted - 1| over {len(rows)} cells x {len(LEVELS)} levels: ", end="")
    print(f"{worst:.2f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
