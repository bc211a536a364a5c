"""What a simulated deployment costs in GPU-seconds: the model load plus the benchmark levels.

A deployment on real hardware is a model load, then per level a warm-up,
the ramp-up to the first token of every client, a steady window the
benchmark's stopping rule ends, and a drain of the requests in flight. The
load is the profile's (LOAD_S, below). The rest is computed per config and
level from the simulator's noise-free prediction (`model.predict_level`):

- warm-up: one 16-token request per client, as many at a time as the server
  runs;
- ramp-up: one time-to-first-token (without the queue);
- window: the stopping rule ends it once the live 95 % CI of throughput is
  within 0.9 x `benchmark.ci_width`, between `min_duration` and
  `max_duration`. A window of W seconds has a CI of k / sqrt(W), so it lasts
  (k / (0.9 ci))^2 clipped to that range; a level whose CI is still above
  the target at `max_duration` is measured once more (as `TrialPipeline`
  does) and costs a second run. k, the CI of a one-second window, is where
  a config's noise enters: at one client, the spread of the tokens one
  verify step emits over the steps per second (K_SINGLE x cv / sqrt(steps
  per second)); with more clients, the waves of requests finishing and
  prefilling dominate, K_BATCH x sqrt(seconds of one request). At one client
  the window is `max_duration`: the client's live CI there does not reach
  the target sooner (measured, see below);
- drain: the requests in flight when the window ends finish (half a request
  on average; none at one client, whose window ends at a request's end).

K_SINGLE and K_BATCH are fitted to autotune's own client against the served
simulator (`experiments/level_seconds.py`, experiments/results/level_seconds.md, which
prints charged against measured seconds per level).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from autotune.bench.runner import CI_STOP_MARGIN
from autotune.config import BenchmarkConfig, Config
from autotune.sim.profiles import get_profile

#: Seconds from restart to ready, per simulator profile.
LOAD_S = {
    # calibration.md: 90-100 s per restart on the measured 4-GPU box.
    "qwen3.5-122b-a10b-mtp": 95.0,
    # Assumed: 16 GB of BF16 weights plus the EAGLE-3 head from local NVMe, CUDA-graph
    # capture for the draft and verify batches; SGLang's usual startup on one H100.
    "llama3.1-8b-eagle3-h100": 60.0,
    # Assumed: 671B FP8 (about 690 GB) read by 8 ranks, MTP head, graph capture; the
    # "minutes on an 8-GPU DeepSeek box" of the issue, taken as ten.
    "deepseek-v3-mtp-8xh200": 600.0,
}
#: CI of a one-second window at one client, per unit of accept-length CV per sqrt(step/s).
K_SINGLE = 2.3
#: CI of a one-second window with several clients, per sqrt(second of one request).
K_BATCH = 0.035
WARMUP_TOKENS = 16


class DeploymentCost(Protocol):
    """What the in-process server charges a deployment: the simulator profile's (`Cost`),
    or a recording's (the experiments' replayed llama-server)."""

    load_s: float
    gpus: int

    def level_parts(self, level: Mapping[str, Any]) -> tuple[float, float]: ...

    def window_s(self, level: Mapping[str, Any]) -> float: ...

    def ci(self, level: Mapping[str, Any], window: float) -> float: ...

    def cut_s(self, level: Mapping[str, Any]) -> float: ...


@dataclass(frozen=True)
class Cost:
    load_s: float
    gpus: int
    benchmark: BenchmarkConfig

    @classmethod
    def of(cls, cfg: Config, profile: str) -> Cost:
        return cls(LOAD_S[profile], get_profile(profile).tp, cfg.benchmark)

    def level_s(self, level: Mapping[str, Any]) -> float:
        """Wall seconds of one level of the benchmark, a second window included if the
        first missed the CI target."""
        first, again = self.level_parts(level)
        return first + again

    def level_parts(self, level: Mapping[str, Any]) -> tuple[float, float]:
        """(seconds of the level's first run, seconds of its second run or 0)."""
        b = self.benchmark
        c = int(level["concurrency"])
        batch = int(level["batch"])
        tpot = float(level["tpot_ms"]) / 1000.0
        ttft = service_ttft(level)
        n = c if b.warmup_requests is None else b.warmup_requests
        warm = math.ceil(n / batch) * (ttft + (WARMUP_TOKENS - 1) * tpot) if n else 0.0
        # Measured: at one client the live CI (chunk weights, 20 batches) stays above the
        # target until 20-31 s in 9 runs of 9, whatever the final CI comes out at.
        window = self.window_s(level)
        # The requests in flight finish (queued ones are cancelled); one client's window
        # ends with its request.
        drain = 0.0 if c == 1 else request_s(level) / 2.0
        first = warm + ttft + window + drain
        return first, first if self.missed(level) else 0.0

    def window_s(self, level: Mapping[str, Any]) -> float:
        """The steady window the stopping rule lets one run of the level last."""
        b = self.benchmark
        if b.ci_width is None:
            return b.min_duration
        if int(level["concurrency"]) == 1:
            return b.max_duration
        needed = (one_second_ci(level) / (CI_STOP_MARGIN * b.ci_width)) ** 2
        return min(b.max_duration, max(b.min_duration, needed))

    def missed(self, level: Mapping[str, Any]) -> bool:
        """Whether the level's CI is still above the target when its window ends."""
        b = self.benchmark
        return b.ci_width is not None and self.ci(level, self.window_s(level)) > b.ci_width

    def ci(self, level: Mapping[str, Any], window: float) -> float:
        """Relative 95 % CI half-width of a window this long."""
        return one_second_ci(level) / math.sqrt(window)

    def cut_s(self, level: Mapping[str, Any]) -> float:
        """A level whose window was ended at min_duration (the trial was pruned there)."""
        first, _ = self.level_parts(level)
        return first - self.window_s(level) + self.benchmark.min_duration


def service_ttft(level: Mapping[str, Any]) -> float:
    """Time to first token without the queue (clients beyond the server's slots wait)."""
    queued = max(0, int(level["concurrency"]) - int(level["batch"]))
    wait = queued / float(level["request_throughput"]) if queued else 0.0
    return max(0.0, float(level["ttft_ms"]) / 1000.0 - wait)


def request_s(level: Mapping[str, Any]) -> float:
    """Seconds one request runs once admitted."""
    tpot = float(level["tpot_ms"]) / 1000.0
    return service_ttft(level) + (float(level["mean_output_tokens"]) - 1.0) * tpot


def one_second_ci(level: Mapping[str, Any]) -> float:
    """Relative 95 % CI half-width of throughput measured over one second (k)."""
    if int(level["concurrency"]) == 1:
        steps_per_s = float(level["batch"]) / (float(level["iteration_ms"]) / 1000.0)
        return K_SINGLE * float(level["accept_cv"]) / math.sqrt(steps_per_s)
    return K_BATCH * math.sqrt(request_s(level))
