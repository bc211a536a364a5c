"""`autotune start` on a config with `workers:`: one worker process per host, run together.

Each worker is an `autotune start --worker NAME` of its own, so a host that
goes down, or a worker that crashes, takes only that worker out; the others
go on with the study, which they share through its database. The workers run
in process groups of their own: a Ctrl-C or SIGTERM reaches this process once
and is passed to each worker once (a second one aborts them, as for one worker).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

from autotune.config import Config
from autotune.log import get

log = get("autotune")


def start_workers(cfg: Config, argv: Sequence[str]) -> int:
    """Run every worker of `cfg` to its end; the exit code is the worst of theirs."""
    from autotune.search import study as st

    # The database is checked (and the study created) once, here: a mistake in it is one
    # line before any worker starts, not one line per worker.
    st.open_study(cfg)
    children: dict[str, subprocess.Popen[bytes]] = {}
    for w in cfg.workers:
        cmd = [sys.executable, "-m", "autotune", *argv, "--worker", w.name]
        children[w.name] = subprocess.Popen(cmd, process_group=0)
    log.info(
        "workers started",
        study=cfg.study.name,
        workers={name: p.pid for name, p in children.items()},
    )

    def forward(signum: int, _frame: FrameType | None) -> None:
        for p in children.values():
            if p.poll() is None:
                p.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        codes = {name: p.wait() for name, p in children.items()}
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    failed = {name: code for name, code in codes.items() if code != 0}
    if failed:
        log.error("workers ended with errors (their own lines say why)", exit_codes=failed)
        return max(failed.values())
    log.info("every worker finished", workers=list(codes))
    return 0
