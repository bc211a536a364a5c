"""A `Measure` for `worker.Worker` that deploys nothing: the simulator's model plus noise.

It mirrors what `TrialPipeline.run` returns for the simulated server, without
HTTP or sleeps:
- a config the server refuses (or that fails at graph capture) -> server_up violated;
- the server resolves the config to one measured before -> `reused_from`;
- capacity below `min_running_requests` -> not benchmarked, infeasible;
- otherwise every level is "benchmarked": the noise-free throughput divided by
  the start's speed factor (the simulator draws one per start from N(1, noise),
  clipped to [0.8, 1.25]; its per-iteration jitter averages out over a window),
  times the benchmark's own sampling error, whose 95 % half-width the
  benchmark's stopping rule holds to `benchmark.ci_width`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from autotune import objective
from autotune.trial import FindMeasured, TrialResult

from .cells import Landscape

SIM_NOISE = 0.02  # the simulator's --sim-noise default


@dataclass
class SimulatedServer:
    land: Landscape
    rng: random.Random
    noise: float = SIM_NOISE
    deployed: list[dict[str, Any]] = field(default_factory=list)
    """Every config deployed, in order (the study's cost)."""

    def __call__(self, params: dict[str, Any] | None, find_measured: FindMeasured) -> TrialResult:
        if params is None:
            raise ValueError("the benchmark's baseline always has explicit flags")
        self.deployed.append(dict(params))
        cfg = self.land.cfg
        levels = cfg.benchmark.concurrency
        t = self.land.truth(params)
        attrs: dict[str, Any] = {"workload": cfg.benchmark.workload}
        if t.resolved is None:
            # The engine adapter's failure kinds: the sim's OOM refusal reads like SGLang's.
            oom = "Not enough memory" in (t.reason or "")
            attrs.update(failure="out_of_memory" if oom else "refused", reason=t.reason)
            return _result(objective.unusable(cfg.objective, levels, server_up=False), attrs)
        running = int(t.levels[0]["max_running_requests"])
        attrs.update(resolved=dict(t.resolved), max_running_requests=running)
        earlier = find_measured(t.resolved)
        if earlier is not None:
            result = _result(objective.unusable(cfg.objective, levels, server_up=True), attrs)
            result.reused_from = earlier
            return result
        if objective.capacity_violation(cfg.objective, running) > 0:
            attrs.update(failure="capacity", reason=t.reason)
            score = objective.unusable(
                cfg.objective, levels, server_up=True, max_running_requests=running
            )
            return _result(score, attrs)
        results = self._benchmark(t.levels)
        for c, r in results.items():
            attrs[f"output_tok_s@c{c}"] = round(r["output_throughput"], 2)
        return _result(objective.score(cfg.objective, levels, results, running), attrs)

    def _benchmark(self, truth_levels: tuple[dict[str, Any], ...]) -> dict[int, dict[str, Any]]:
        speed = min(1.25, max(0.8, self.rng.gauss(1.0, self.noise))) if self.noise > 0 else 1.0
        ci = self.land.cfg.benchmark.ci_width
        sampling = ci / 1.96 if ci and self.noise > 0 else 0.0
        out = {}
        for lv in truth_levels:
            slow = speed * math.exp(self.rng.gauss(0.0, sampling))
            out[int(lv["concurrency"])] = {
                "concurrency": lv["concurrency"],
                "output_throughput": float(lv["output_throughput"]) / slow,
                "ttft_p99_ms": float(lv["ttft_ms"]) * slow,
                "itl_p50_ms": float(lv["tpot_ms"]) * slow,
            }
        return out


def _result(score: objective.Score, attrs: dict[str, Any]) -> TrialResult:
    return TrialResult(score=score, attrs=attrs, unit_text="")
