"""What a deployment would show, predicted from the ones measured: the sampler's prior.

Per objective level c, a config that runs B = min(c, max_running_requests)
requests at once, emits L tokens per verify step and iterates every T
seconds delivers

    throughput = B * L / T

- B: capacity, from the engine's memory rule (`autotune/search/capacity.py`:
  1 / max_running_requests is a line in the KV tokens a request reserves; two
  deployments pin it);
- L: acceptance per position (`acceptance.py`): a deep chain measures every
  shallower one;
- T: step cost (`step_cost.py`), linear in steps, batch and verified tokens.

The objective's value (a level, or the geometric mean over levels) follows;
each part carries its own uncertainty. The model is checked before it is
trusted: once MIN_CHECKED deployments were measured, each of the latest
CHECKED is predicted from the deployments of other draft shapes (its whole
shape left out: the configs the model steered to, deployed again, do not
vouch for it), and a root-mean-square miss above MISFIT turns it off. Each
residual is compared with what measured it: the value's with its levels'
95 % intervals, the accept length's with the error of the verify steps the
server counted (the measurement's variance taken out of the residual's
square); a deployment misses by the larger of the two. A noisy
benchmark is not read as a wrong model, and a wrong acceptance curve cannot
hide behind a CPU server's wide throughput intervals, since the server counts
acceptance precisely. The sampler then runs as before (a GP
from scratch) and the study's record says why. It is off from the start
where its physics does not hold: a space without `draft_shape` (n-gram
drafting, adaptive speculation), the Pareto objective, or deployments whose
server reported no accept length.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from optuna.trial import FrozenTrial

from autotune.search import capacity, records
from autotune.search.records import config_of, measured, value_of
from autotune.space import SearchSpace

from .acceptance import Acceptance, Seen, length_sampling_sd, reach_from_histogram
from .step_cost import StepCost, Timed

#: Deployments measured before predictions are checked against them, and how many of
#: the latest are checked.
MIN_CHECKED = 3
CHECKED = 6
#: Leave-one-out RMS miss (log units, beyond each measurement's error) above which the
#: model is not trusted.
MISFIT = 0.08
#: Relative error of a capacity-limited batch when only its rule bounds are known.
_CAPACITY_SD = 0.05
#: The trial user attribute the sampler writes its prediction to, and the study's.
PREDICTED = records.PREDICTED
STATUS = records.STUDY_PERFORMANCE_MODEL


@dataclass(frozen=True)
class Target:
    """What the study scores: its levels, how they combine, its floor on running requests."""

    levels: tuple[int, ...]
    mode: str
    level: int | None = None
    floor: int | None = None

    @property
    def scored(self) -> tuple[int, ...]:
        return (self.level,) if self.mode == "single" and self.level is not None else self.levels


@dataclass(frozen=True)
class Deployed:
    """One measured deployment, as the model reads it."""

    number: int
    config: dict[str, Any]
    shape: tuple[int, int, int]
    running: int | None
    memory: float | None
    levels: tuple[dict[str, Any], ...]
    log_value: float | None


@dataclass(frozen=True)
class Prediction:
    log_value: float
    sd: float
    per_level: dict[int, float]
    """Predicted throughput per scored level (tok/s)."""
    accept_length: float
    accept_sd: float
    """Relative sd of accept_length (sampling of the counts behind it and the model's own)."""
    running: float | None

    def attrs(self) -> dict[str, Any]:
        return {
            "value": round(math.exp(self.log_value), 2),
            "sd": round(self.sd, 4),
            "output_tok_s": {str(c): round(v, 1) for c, v in self.per_level.items()},
            "accept_length": round(self.accept_length, 3),
            "accept_length_sd": round(self.accept_length * self.accept_sd, 3),
            **({"max_running_requests": round(self.running, 1)} if self.running else {}),
        }


@dataclass(frozen=True)
class PerfModel:
    space: SearchSpace
    target: Target
    acceptance: Acceptance
    cost: StepCost
    capacity_points: tuple[tuple[float, int], ...]
    deployed: tuple[Deployed, ...]
    _cache: dict[Any, Prediction] = field(default_factory=dict, compare=False, repr=False)
    """Predictions by draft shape, tokens reserved and every other knob (a memory knob such
    as `mem_fraction_static` moves the pool): all a prediction depends on."""

    # -- fitting ---------------------------------------------------------------------
    @classmethod
    def fit(
        cls, space: SearchSpace, target: Target, deployed: Sequence[Deployed]
    ) -> PerfModel | str:
        """The model, or why there is none."""
        seen, timed = [], []
        for d in deployed:
            steps, topk, draft = d.shape
            lengths = [_accept_length(r) for r in d.levels]
            known = [x for x in lengths if x]
            if steps > 0 and not known:
                continue  # the server said nothing about acceptance
            length = float(np.mean(known)) if known else 1.0
            reach, drafts = _reach(d.levels)
            seen.append(Seen(steps, topk, draft, length, reach, drafts))
            for r, lv in zip(d.levels, lengths, strict=True):
                tput = float(r.get("output_throughput") or 0.0)
                batch = _batch(int(r["concurrency"]), d.running)
                if tput > 0:
                    timed.append(Timed(steps, topk, draft, batch, batch * (lv or length) / tput))
        if not seen:
            return "no deployment measured an accept length yet"
        acceptance = Acceptance.fit(seen) if any(s.depth > 0 for s in seen) else None
        if acceptance is None:
            return "no speculating deployment measured yet"
        cost = StepCost.fit(timed)
        if cost is None:
            return "no level measured a throughput yet"
        points = tuple(
            (d.memory, d.running) for d in deployed if d.memory is not None and d.running
        )
        return cls(space, target, acceptance, cost, points, tuple(deployed))

    # -- predicting --------------------------------------------------------------------
    def points_for(self, config: Mapping[str, Any]) -> tuple[tuple[float, int], ...]:
        """(tokens reserved, max_running_requests) of the deployments that differ from
        `config` only in the knobs the reservation depends on: the memory rule relates
        those alone. A deployment at another `mem_fraction_static` (or any other knob) had
        another pool, and says nothing of this config's."""
        names = self.space.memory_per_request.names if self.space.memory_per_request else set()
        rest = {k: v for k, v in config.items() if k not in names}
        return tuple(
            (d.memory, d.running)
            for d in self.deployed
            if d.memory is not None
            and d.running
            and all(d.config.get(k) == v for k, v in rest.items())
        )

    def running(self, config: Mapping[str, Any]) -> tuple[float | None, float]:
        """Predicted max_running_requests (None: unknown) and its relative sd."""
        m = self.space.memory_tokens(config)
        points = self.points_for(config)
        if m is None or not points:
            return None, 0.0
        same = [r for pm, r in points if pm == m]
        if same:
            return float(np.mean(same)), 0.0
        b = capacity.rule_bounds(points, m)
        if b is not None and math.isfinite(b[1]) and b[0] > 0:
            low, high = b
            # Uniform in 1 / running between the bounds: its middle.
            return 2.0 / (1.0 / low + 1.0 / high), (high - low) / (high + low)
        p = capacity.fit(points, m)
        if p is not None and math.isfinite(p.high):
            return p.max_running_requests, max(_CAPACITY_SD, (p.high - p.low) / (4 * p.high))
        # Nearest deployed reservation: the rule says fewer requests for more tokens.
        pm, r = min(points, key=lambda x: abs(x[0] - m))
        return float(r) * (pm / m if m > pm else 1.0), 0.3

    def predict(self, config: Mapping[str, Any]) -> Prediction | None:
        shape = self.space.shape(config)
        if shape is None:
            return None
        others = tuple(sorted((k, str(v)) for k, v in config.items()))
        key = (shape, self.space.memory_tokens(config), others)
        if key not in self._cache:
            self._cache[key] = self._predict(config, shape)
        return self._cache[key]

    def _predict(self, config: Mapping[str, Any], shape: tuple[int, int, int]) -> Prediction:
        steps, topk, draft = shape
        length = self.acceptance.length(steps, topk, draft)
        l_sd = self.acceptance.relative_sd(steps, topk, draft) if steps > 0 else 0.0
        running, r_sd = self.running(config)
        logs, variances, per_level = [], [], {}
        for c in self.target.scored:
            batch = _batch(c, running)
            t, t_sd = self.cost.predict(steps, topk, draft, batch)
            tput = batch * length / t
            per_level[c] = tput
            logs.append(math.log(tput))
            capped = running is not None and running < c
            variances.append((t_sd / t) ** 2 + (r_sd**2 if capped else 0.0))
        n = len(logs)
        log_value = sum(logs) / n
        # Acceptance is common to every level; the levels' step costs are not independent
        # either (one fit): their sds are averaged, not pooled.
        sd = math.sqrt(l_sd**2 + (sum(math.sqrt(v) for v in variances) / n) ** 2)
        return Prediction(log_value, sd, per_level, length, l_sd, running)

    def predict_many(
        self, configs: Sequence[Mapping[str, Any]]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        out = [self.predict(c) for c in configs]
        if any(p is None for p in out):
            return None
        return (
            np.array([p.log_value for p in out if p is not None]),
            np.array([p.sd for p in out if p is not None]),
        )


def build(
    space: SearchSpace, target: Target | None, trials: Sequence[FrozenTrial]
) -> tuple[PerfModel | None, dict[str, Any]]:
    """The checked model over a study's measured trials, and the status the study records.

    The sampler and the declared best ask for the same trials in turn: the last answer is
    kept."""
    key = (id(space), target, tuple((t.number, t.datetime_complete) for t in measured(trials)))
    if _last[0] != key:
        _last[:] = [key, _build(space, target, trials)]
    return _last[1]


_last: list[Any] = [None, None]


def _build(
    space: SearchSpace, target: Target | None, trials: Sequence[FrozenTrial]
) -> tuple[PerfModel | None, dict[str, Any]]:
    if target is None:
        return None, {"on": False, "reason": "not used (study.performance_model: false)"}
    if space.draft_shape is None:
        reason = "the space has no draft_shape (n-gram or adaptive drafting: no chain to model)"
        return None, {"on": False, "reason": reason}
    if target.mode == "pareto":
        return None, {"on": False, "reason": "the Pareto objective scores no single value"}
    if target.mode not in ("geomean", "single"):
        reason = f"objective.mode {target.mode} scores open-loop rates, which it does not predict"
        return None, {"on": False, "reason": reason}
    deployed = deployments(space, target, trials)
    model = PerfModel.fit(space, target, deployed)
    if isinstance(model, str):
        return None, {"on": False, "reason": model, "fitted_on": 0}
    status: dict[str, Any] = {"on": True, "fitted_on": len(deployed)}
    rms = loo_error(space, target, deployed)
    if rms is not None:
        status["loo_rms"] = round(rms, 4)
        if rms > MISFIT:
            status.update(
                on=False,
                reason=(
                    f"its predictions missed the measured values by {rms:.1%} RMS beyond their "
                    f"intervals (each of the latest {min(CHECKED, len(deployed))} deployments "
                    f"predicted from the other draft shapes'; trusted below {MISFIT:.0%}): "
                    "the GP learns from scratch"
                ),
            )
            return None, status
    return model, status


def describe(status: Mapping[str, Any]) -> str:
    """The study's `performance_model` record as one line."""
    if not status.get("on"):
        return f"off: {status.get('reason', 'not fitted yet')}"
    text = f"on, fitted on {status.get('fitted_on')} deployments"
    if status.get("loo_rms") is not None:
        text += f", leave-one-out error {float(status['loo_rms']):.1%} RMS"
    return text


def held_out(deployed: Sequence[Deployed], i: int) -> list[Deployed]:
    """The deployments the model is refitted on to predict deployment `i`: every one of
    another draft shape. Holding out `i` alone leaves its shape's other deployments in (the
    configs the model steered to, deployed again), so the check could not see a wrong
    extrapolation to a shape it avoided."""
    return [d for d in deployed if d.shape != deployed[i].shape]


def loo_error(space: SearchSpace, target: Target, deployed: Sequence[Deployed]) -> float | None:
    """RMS of the misses of the latest CHECKED deployments, each predicted without its shape."""
    scored = [i for i, d in enumerate(deployed) if d.log_value is not None]
    if len(scored) < MIN_CHECKED:
        return None
    misses = []
    for i in scored[-CHECKED:]:
        d, rest = deployed[i], held_out(deployed, i)
        model = PerfModel.fit(space, target, rest)
        if isinstance(model, str):
            continue
        p = model.predict(d.config)
        if p is not None and d.log_value is not None:
            misses.append(miss(p, d, target))
    if len(misses) < MIN_CHECKED - 1:
        return None
    return float(np.sqrt(np.mean(np.square(misses))))


def miss(p: Prediction, d: Deployed, target: Target) -> float:
    """How far a prediction missed a deployment, its measurement error taken out (log
    units): the larger of its value's miss and its accept length's."""
    assert d.log_value is not None
    value = unexplained(p.log_value - d.log_value, value_sd(d, target))
    lengths = [x for r in d.levels if (x := _accept_length(r))]
    if not lengths or d.shape[0] == 0:
        return value
    measured = float(np.mean(lengths))
    accept = unexplained(math.log(p.accept_length / measured), accept_sd(d, measured))
    return max(value, accept)


def unexplained(residual: float, sd: float) -> float:
    """The part of a residual its measurement's sd does not explain: a residual's square is
    the model's error squared plus the measurement's variance (0 where the variance covers
    it; a residual is never excused by more than its own measurement)."""
    return math.sqrt(max(0.0, residual * residual - sd * sd))


def value_sd(d: Deployed, target: Target) -> float:
    """Relative sd of a deployment's measured value from its scored levels' 95 % intervals
    (the geometric mean of n levels: their variances summed over n squared); 0 where no
    level carries one."""
    scored = [r for r in d.levels if r.get("concurrency") in target.scored]
    halves = [h for r in scored if isinstance(h := r.get("ci_halfwidth"), (int, float))]
    if not scored or not halves:
        return 0.0
    return math.sqrt(sum((h / 1.96) ** 2 for h in halves)) / len(scored)


def accept_sd(d: Deployed, length: float) -> float:
    """Relative sd of a deployment's measured accept length from the verify steps its server
    counted; 0 where it did not say how many (the mean is then taken as exact)."""
    reach, steps = _reach(d.levels)
    if not reach or not steps:
        return 0.0
    return length_sampling_sd(reach, steps) / length


def deployments(
    space: SearchSpace, target: Target, trials: Sequence[FrozenTrial]
) -> list[Deployed]:
    """Measured trials with a draft shape and levels, in the order they ran."""

    out = []
    for t in sorted(measured(trials), key=lambda t: t.number):
        config = config_of(t)
        shape = space.shape(config)
        rows = t.user_attrs.get(records.LEVELS)
        if shape is None or not isinstance(rows, list) or not rows:
            continue
        running = t.user_attrs.get(records.MAX_RUNNING_REQUESTS)
        value = value_of(t)
        complete = all(c in {r.get("concurrency") for r in rows} for c in target.scored)
        out.append(
            Deployed(
                t.number,
                config,
                shape,
                running if isinstance(running, int) else None,
                space.memory_tokens(config),
                tuple(r for r in rows if isinstance(r, dict) and "concurrency" in r),
                math.log(value) if value and value > 0 and complete else None,
            )
        )
    return out


def _batch(concurrency: int, running: float | None) -> float:
    return float(min(concurrency, running)) if running else float(concurrency)


def _accept_length(row: Mapping[str, Any]) -> float | None:
    for key in ("accept_length", "server_accept_length"):
        v = row.get(key)
        if isinstance(v, (int, float)) and v > 0:
            return float(v)
    return None


def _reach(rows: Sequence[Mapping[str, Any]]) -> tuple[tuple[float, ...] | None, float | None]:
    """Per-position reach pooled over a deployment's levels, and the verify steps it was
    counted on (None: unknown): SGLang's histogram of accepted drafts per verify step, or
    the per-position acceptance of vLLM and llama.cpp (already a reach) with their count
    of drafts."""
    histogram: list[int] = []
    for r in rows:
        h = r.get("accept_histogram")
        if isinstance(h, list):
            histogram = [a + b for a, b in _padded(histogram, h)]
    if histogram:
        return reach_from_histogram(histogram), float(sum(histogram))
    counted = [
        (x, r.get("server_drafts"))
        for r in rows
        if isinstance(x := r.get("server_acceptance_per_position"), list) and x
    ]
    if not counted:
        return None, None
    depth = min(len(x) for x, _ in counted)
    drafts = [n for _, n in counted]
    if all(isinstance(n, (int, float)) and n > 0 for n in drafts):
        total = float(sum(drafts))
        reach = tuple(sum(x[i] * n for x, n in counted) / total for i in range(depth))
        return reach, total
    return tuple(float(np.mean([x[i] for x, _ in counted])) for i in range(depth)), None


def _padded(a: Sequence[int], b: Sequence[int]) -> list[tuple[int, int]]:
    n = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0, int(b[i]) if i < len(b) else 0) for i in range(n)]
