"""Wait until the GPUs are free before starting the next server.

A server that was just stopped can leave a zombie process holding GPU memory
for a while; starting the next config into that memory fails with an OOM
that says nothing about the config. "Free" means the check command prints
nothing (no compute process left).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from autotune import log
from autotune.deploy.runner import Runner, brief
from autotune.errors import DeployError

DEFAULT_COMMAND = (
    "nvidia-smi",
    "--query-compute-apps=pid,used_memory",
    "--format=csv,noheader",
)


@dataclass(frozen=True)
class GpuWaitSettings:
    """YAML: `target.gpu_wait` (its presence turns the wait on)."""

    command: tuple[str, ...] | str = DEFAULT_COMMAND
    """Prints one line per process still on a GPU and nothing when they are free.
    A string is split like a shell would (no shell runs it)."""
    timeout_s: float = 120.0
    poll_s: float = 2.0

    def __post_init__(self) -> None:
        words = shlex.split(self.command) if isinstance(self.command, str) else tuple(self.command)
        if not words:
            raise ValueError("gpu_wait.command is empty")
        object.__setattr__(self, "command", tuple(words))
        if self.timeout_s <= 0 or self.poll_s <= 0:
            raise ValueError("gpu_wait.timeout_s and gpu_wait.poll_s must be > 0")

    @property
    def argv(self) -> tuple[str, ...]:
        assert isinstance(self.command, tuple)
        return self.command


def gpu_processes(runner: Runner, settings: GpuWaitSettings) -> list[str]:
    """Lines the check command prints now (empty: GPUs free). DeployError if it fails."""
    result = runner.run(settings.argv)
    if not result.ok:
        detail = result.err.strip() or result.out.strip()
        raise DeployError(
            f"GPU check `{brief(settings.argv)}` on {runner.description} failed "
            f"(exit {result.exit_code}): {detail}"
        )
    return [line.strip() for line in result.out.splitlines() if line.strip()]


def wait_for_free_gpus(
    runner: Runner,
    settings: GpuWaitSettings,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Block until the GPUs are free; return the seconds waited. DeployError on timeout."""
    started = clock()
    deadline = started + settings.timeout_s
    busy: Sequence[str] = gpu_processes(runner, settings)
    if busy:
        log.get(__name__).info("gpu_wait.busy", processes=list(busy), target=runner.description)
    while busy:
        if clock() >= deadline:
            raise DeployError(
                f"GPUs on {runner.description} still busy after {settings.timeout_s:.0f} s "
                f"({'; '.join(busy)}): a process from the previous run is holding them"
            )
        sleep(min(settings.poll_s, max(0.0, deadline - clock())))
        busy = gpu_processes(runner, settings)
    return clock() - started
