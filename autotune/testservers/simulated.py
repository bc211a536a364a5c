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
  benchmark's stopping rule holds to `benchmark.ci_width`;
- with a level plan (`autotune/search/pruning.py`), the levels run in its order and
  the trial may be pruned as `TrialPipeline` prunes it: after a level, after
  one run of a level that missed its CI target (before the second), or at
  min_duration into a level's window (the client asks every tick; here once),
  each from what the window would show then (`cost.Cost.ci`).
Every deployment is charged its GPU time (`testservers/cost.py`): the model load, then
the levels it ran, a level cut short up to min_duration.

What the performance model reads of a level is what the server's counters would give
over the window, not the simulator's expectation: the verify steps the window held
(its output tokens over the accept length), each emitting a count drawn from the
config's acceptance distribution; the accept length is their mean, SGLang's histogram
their counts.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autotune.run.trial import FindMeasured, TrialResult
from autotune.search import objective, records
from autotune.search.pruning import PRUNED, LevelPlan
from autotune.testservers.cost import Cost, DeploymentCost
from autotune.testservers.landscape import Landscape

SIM_NOISE = 0.02  # the simulator's --sim-noise default


@dataclass
class SimulatedServer:
    land: Landscape
    rng: random.Random
    noise: float = SIM_NOISE
    endpoint: str = "chat"
    """The benchmark's endpoint: `generate` (SGLang's native one) also returns the per-request
    histogram of accepted drafts, the OpenAI-compatible ones the mean accept length only."""
    cost: DeploymentCost = field(init=False)
    deployed: list[dict[str, Any]] = field(default_factory=list)
    """Every config deployed, in order (the study's cost)."""
    gpu_seconds: list[float] = field(default_factory=list)
    """What each deployment cost: the model load plus the benchmark levels it ran."""

    def __post_init__(self) -> None:
        self.cost = self.land.cost or Cost.of(self.land.cfg, self.land.profile)
        # What a window shows before it ends comes from its own stream, so that the
        # measurements themselves are drawn exactly as before pruning existed.
        # Seeded from the state's numbers (a hash of the state would include None's,
        # which differs from process to process).
        state = ",".join(map(str, self.rng.getstate()[1][:8]))
        self._early = random.Random(state)
        # The verify steps' counts, from a stream of their own for the same reason.
        self._counts = np.random.default_rng(random.Random(f"{state}/counts").getrandbits(64))

    def __call__(
        self,
        params: dict[str, Any] | None,
        find_measured: FindMeasured,
        plan: LevelPlan | None = None,
    ) -> TrialResult:
        if params is None:
            raise ValueError("the benchmark's baseline always has explicit flags")
        self.deployed.append(dict(params))
        cfg = self.land.cfg
        levels = cfg.benchmark.concurrency
        t = self.land.truth(params)
        # Every deployment loads the model, whatever happens next (an out-of-memory refusal
        # and a capacity check come after the weights are in).
        self.gpu_seconds.append(self.cost.load_s)
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
        drawn = self._benchmark(t.levels)
        results: dict[int, dict[str, Any]] = {}
        verdict = None
        by_level = {int(lv["concurrency"]): lv for lv in t.levels}
        for c in plan.levels if plan is not None else levels:
            lv, got = by_level[c], drawn[c]
            first, again = self.cost.level_parts(lv)
            measured = {k: r["output_throughput"] for k, r in results.items()}
            give_up = plan.give_up(c, measured) if plan is not None else None
            # The client asks every tick from min_duration on; here once, at min_duration.
            if give_up is not None and give_up(got["live_tok_s"], got["live_ci"]):
                results[c] = {**got, "output_throughput": got["live_tok_s"]}
                self.gpu_seconds[-1] += self.cost.cut_s(lv)
                verdict = give_up.verdict
                break
            if again and plan is not None:
                # One run missed its CI target: pruned now, or measured a second time.
                sd = {c: got["first_ci"] / 1.96}
                verdict = plan.verdict({**measured, c: got["first_tok_s"]}, sd)
                if verdict is not None:
                    results[c] = {**got, "output_throughput": got["first_tok_s"]}
                    self.gpu_seconds[-1] += first
                    break
            results[c] = got
            self.gpu_seconds[-1] += first + again
            if plan is not None:
                measured = {k: r["output_throughput"] for k, r in results.items()}
                verdict = plan.verdict(measured)
                if verdict is not None:
                    break
        attrs[records.LEVELS] = [
            self._row(by_level[c], r) for c in levels if (r := results.get(c)) is not None
        ]
        for c, r in results.items():
            attrs[records.at(records.OUTPUT_TOK_S_AT, c)] = round(r["output_throughput"], 2)
        if verdict is not None:
            attrs[PRUNED] = verdict.attrs()
            measured_levels = [c for c in levels if c in results]
            score = objective.score(cfg.objective, measured_levels, results, running)
            result = _result(score, attrs)
            result.pruned = True
            return result
        return _result(objective.score(cfg.objective, levels, results, running), attrs)

    def _row(self, truth: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
        """The level as the trial records it (`LevelResult.to_dict`), with what the
        performance model reads: accept length, and with `benchmark.endpoint: generate`
        SGLang's histogram of accepted drafts over the window's verify steps."""
        row = {
            "concurrency": truth["concurrency"],
            "output_throughput": got["output_throughput"],
            "ttft_ms_p99": got["ttft_p99_ms"],
            "itl_ms_p50": got["itl_p50_ms"],
        }
        if truth["accept_length"] is None:
            return row  # a foreign cell whose source posted no accept length
        length = float(truth["accept_length"])
        steps = max(1, round(got["output_throughput"] * self.cost.window_s(truth) / length))
        counts = self._counts.multinomial(steps, _normalised(truth["accept_dist"]))
        sampled = float(sum((i + 1) * n for i, n in enumerate(counts))) / steps
        row["accept_length"] = round(sampled, 4)
        # Only the native endpoint carries SGLang's per-request histogram (the client reads
        # it from `meta_info`); the OpenAI-compatible default gives the mean alone.
        if self.endpoint == "generate":
            row["accept_histogram"] = [int(n) for n in counts]
        return row

    def _benchmark(self, truth_levels: tuple[dict[str, Any], ...]) -> dict[int, dict[str, Any]]:
        """Every level's noisy measurement, drawn in the configured order whatever order the
        levels are measured in: the same seed gives every candidate the same noise."""
        speed = min(1.25, max(0.8, self.rng.gauss(1.0, self.noise))) if self.noise > 0 else 1.0
        ci = self.land.cfg.benchmark.ci_width
        sampling = ci / 1.96 if ci and self.noise > 0 else 0.0
        # A recorded landscape states its windows' error even where starts did not differ.
        noisy = self.noise > 0 or self.land.level_sd is not None
        min_d = self.land.cfg.benchmark.min_duration
        out = {}
        for lv in truth_levels:
            true = float(lv["output_throughput"]) / speed
            if self.land.level_sd is not None:
                sampling = self.land.level_sd[int(lv["concurrency"])]
            slow = math.exp(self.rng.gauss(0.0, sampling))
            # What the window shows at min_duration, and after one run of a level that
            # misses its CI target (drawn for every level: common random numbers).
            live_ci = self.cost.ci(lv, min_d) if noisy else 0.0
            first_ci = self.cost.ci(lv, self.cost.window_s(lv)) if noisy else 0.0
            live = true * math.exp(self._early.gauss(0.0, live_ci / 1.96))
            first = true * math.exp(self._early.gauss(0.0, first_ci / 1.96))
            out[int(lv["concurrency"])] = {
                "concurrency": lv["concurrency"],
                "output_throughput": true / slow,
                "ttft_p99_ms": None if lv["ttft_ms"] is None else lv["ttft_ms"] * speed * slow,
                "itl_p50_ms": float(lv["tpot_ms"]) * speed * slow,
                "live_tok_s": live,
                "live_ci": live_ci,
                "first_tok_s": first,
                "first_ci": first_ci,
            }
        return out


def _normalised(dist: Any) -> np.ndarray:
    p = np.clip(np.asarray(dist, dtype=float), 0.0, None)
    return p / p.sum()


def _result(score: objective.Score, attrs: dict[str, Any]) -> TrialResult:
    return TrialResult(score=score, attrs=attrs, unit_text="")
