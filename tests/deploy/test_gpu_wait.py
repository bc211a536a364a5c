"""Waiting for free GPUs: the polling loop alone (a stub runner), then the stand-in nvidia-smi."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from autotune.deploy.gpu_wait import DEFAULT_COMMAND, GpuWaitSettings, wait_for_free_gpus
from autotune.deploy.runner import LocalRunner, Result
from autotune.errors import DeployError
from tests.helpers.fake_systemd_host import FakeSystemdHost


class _Answers:
    """A runner that answers the GPU query from a script of outputs (unit test of one function)."""

    description = "stub"

    def __init__(self, outputs: list[str], code: int = 0) -> None:
        self.outputs = outputs
        self.code = code
        self.calls = 0

    def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, timeout: float | None = None
    ) -> Result:
        self.calls += 1
        out = self.outputs.pop(0) if self.outputs else ""
        return Result(tuple(argv), self.code, out.encode(), b"boom" if self.code else b"")


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_default_command_and_string_form() -> None:
    assert GpuWaitSettings().argv == DEFAULT_COMMAND
    custom = GpuWaitSettings(
        command="nvidia-smi --id=0,1 --query-compute-apps=pid --format=csv,noheader"
    )
    assert custom.argv[1] == "--id=0,1"
    with pytest.raises(ValueError):
        GpuWaitSettings(command="")


def test_waits_until_output_is_empty() -> None:
    runner = _Answers(["123, 500 MiB\n", "123, 200 MiB\n", "\n"])
    clock = _Clock()
    waited = wait_for_free_gpus(runner, GpuWaitSettings(poll_s=2), sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    assert runner.calls == 3 and waited == 4.0


def test_times_out_naming_the_process() -> None:
    runner = _Answers(["999, 40000 MiB"] * 100)
    clock = _Clock()
    settings = GpuWaitSettings(timeout_s=10, poll_s=3)
    with pytest.raises(DeployError, match=r"still busy after 10 s.*999, 40000 MiB"):
        wait_for_free_gpus(runner, settings, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]


def test_failing_check_is_a_deploy_error() -> None:
    with pytest.raises(DeployError, match=r"GPU check .* failed .exit 9.: boom"):
        wait_for_free_gpus(_Answers([], code=9), GpuWaitSettings())  # type: ignore[arg-type]


def test_stand_in_nvidia_smi_busy_then_free(fake_host: FakeSystemdHost) -> None:
    fake_host.set_gpu_busy(3)
    waited = wait_for_free_gpus(LocalRunner(), fake_host.gpu_wait(poll_s=0.05))
    assert waited >= 0.15
    assert (fake_host.state / "gpu_busy_calls").read_text().strip() == "0"
