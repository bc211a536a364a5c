"""The default sampler: a Gaussian process over every config of the space, expected improvement.

A speculative-decoding space is small and discrete (427 configs for SGLang's
three knobs) and every trial costs minutes of GPU time, so the sampler can
afford to score every config not measured yet and deploy the best by expected
improvement. On the simulator's landscapes (experiments/sample_efficiency.py, 20
seeds per cell) the declared best reaches 98 % of the optimum in 5-13
deployments (median) where multivariate TPE needs 8-16: TPE's densities say
little before a few dozen trials. Optuna's GPSampler needs PyTorch and minutes
of CPU per study; this one needs numpy and milliseconds.

The model:
- inputs: each tuned parameter in [0, 1] (features.py);
- objective: log throughput of the benchmarked trials, noise 1-8 %;
- constraints: each violated constraint with a measured margin (running
  requests short of the floor, ms over a latency ceiling) gets its own GP,
  and so does "the server came up" (0 or 1); expected improvement is weighted
  by the chance that every one holds;
- an engine fact, when the space names it (`memory_grows_with`): a config
  that needs at least as much of each memory-growing knob as one that ran out
  of memory or of running requests fails too, and is never proposed.
Configs measured already (as proposed or as the server resolved them) are
never proposed again. The first `n_startup_trials` proposals are unmeasured
configs drawn knob by knob at random.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.search import capacity, perf, records, warm_start
from autotune.search.objective import MIN_RUNNING_REQUESTS, SERVER_UP
from autotune.search.records import config_of, measured, value_of
from autotune.space import SearchSpace

from .features import features
from .model import GP, expected_improvement, normal_cdf

#: Measurement noise tried, as a relative standard deviation of throughput: a restarted
#: server is never exactly as fast as the last time (1-2 % on real GPUs), and a short
#: benchmark adds its own error.
NOISE_SD = (0.01, 0.02, 0.04, 0.08)
#: Naming the best, the model may not call a real difference noise: only restart noise.
#: (Allowed more, it smooths a sharp optimum -- steps 2 between 1 and 3 -- into a neighbour.)
RECOMMEND_NOISE_SD = (0.01, 0.02)
#: Spread of log throughput across a space before there is data to say: configs of one
#: server differ by tens of percent, not by factors.
PRIOR_LOG_SD = 0.3
#: Random draws among which a startup proposal made beside running trials takes the farthest.
STARTUP_DRAWS = 8
#: Failure kinds after which a config with at least as much of every memory knob fails too.
MEMORY_FAILURES = ("out_of_memory", "capacity")
#: The user attribute a pruned trial keeps its verdict in (`autotune/search/pruning.py`).
PRUNED = records.PRUNED
#: How far log throughput may stray from the performance model's prediction before data
#: say otherwise: what the residual GP learns is what the physics misses.
RESIDUAL_PRIOR_SD = 0.1


class EnumeratedGPSampler(optuna.samplers.BaseSampler):
    def __init__(
        self,
        space: SearchSpace,
        *,
        seed: int | None = None,
        n_startup_trials: int = 2,
        target: perf.Target | None = None,
        startup_when_modelled: int = 0,
    ) -> None:
        self._space = space
        self._target = target
        self._startup_modelled = startup_when_modelled
        self._rng = np.random.default_rng(seed)
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._n_startup = n_startup_trials
        self._configs = [dict(c.params) for c in space.enumerate() if c.valid]
        self._keys = [space.key(c) for c in self._configs]
        self._X = np.array([features(space, c) for c in self._configs])
        self._memory = np.array([_memory_knobs(space, c) for c in self._configs])

    # -- Optuna's sampler interface ----------------------------------------------
    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self._space.distributions() if len(study.directions) == 1 else {}

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        done = [t for t in measured(trials) if _placeable(self._space, config_of(t))]
        busy = [
            config_of(t)
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.number != trial.number and _placeable(self._space, config_of(t))
        ]
        pool = self._unmeasured(done, busy)
        model, status = perf.build(self._space, self._target, trials)
        if self._target is not None and study.user_attrs.get(perf.STATUS) != status:
            study.set_user_attr(perf.STATUS, status)
        startup = self._n_startup if model is None else self._startup_modelled
        if len(done) < startup and pool.size:
            return self._space.encode(self._configs[self._startup_pick(pool, busy)])
        if pool.size == 0:
            # Every config measured or ruled out: propose one measured already, which the
            # study answers from the earlier result instead of deploying a server.
            return self._space.encode(config_of(done[-1])) if done else {}
        earlier = self._earlier(study, done)
        acq = self._acquisition(done, pool, busy, model, earlier)
        chosen = self._configs[int(pool[np.argmax(acq)])]
        if model is not None:
            predicted = model.predict(chosen)
            if predicted is not None:
                study._storage.set_trial_user_attr(
                    trial._trial_id, perf.PREDICTED, predicted.attrs()
                )
        return self._space.encode(chosen)

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self._random.sample_independent(study, trial, param_name, param_distribution)

    def _earlier(self, study: optuna.Study, done: Sequence[FrozenTrial]) -> warm_start.Prior | None:
        """An earlier study's evidence (`start --from`), down-weighted by what this one has
        measured against it (`warm_start.prior`)."""
        record = study.user_attrs.get(records.STUDY_WARM_START)
        if not record or not warm_start.checked_holds(record):
            return None  # not checked against the baseline yet, or the world moved
        now = [
            (config_of(t), v) for t in done if (v := value_of(t)) and t.state == TrialState.COMPLETE
        ]
        found = warm_start.prior(record, now)
        kept = tuple(p for p in found.points if _placeable(self._space, p[0]))
        return warm_start.Prior(kept, found.offset, found.disagreement, found.pairs)

    # -- choosing -------------------------------------------------------------------
    def _startup_pick(self, pool: np.ndarray, busy: Sequence[dict[str, Any]]) -> int:
        """A random config; while other workers measure theirs, the farthest of a few random
        draws from every config running, so that a first round of N hosts covers the space."""
        if not busy:
            return self._random_pick(pool)
        taken = np.array([features(self._space, c) for c in busy])
        draws = [self._random_pick(pool) for _ in range(STARTUP_DRAWS)]
        gaps = [float(np.min(np.sum((taken - self._X[i]) ** 2, axis=1))) for i in draws]
        return draws[int(np.argmax(gaps))]

    def _random_pick(self, pool: np.ndarray) -> int:
        """At random, knob by knob: each topk as likely as another, whatever its number of configs.

        Uniform over configs would mostly pick big trees (topk 8 alone holds half the
        configs of the SGLang space) and rarely try a chain.
        """
        free = {self._keys[i]: int(i) for i in pool}
        for _ in range(100):
            study: dict[str, Any] = {}
            for name, dist in self._space.distributions().items():
                if isinstance(dist, CategoricalDistribution):
                    study[name] = dist.choices[int(self._rng.integers(len(dist.choices)))]
                elif isinstance(dist, IntDistribution):
                    study[name] = int(self._rng.integers(dist.low, dist.high + 1))
                else:
                    study[name] = float(self._rng.uniform(dist.low, dist.high))  # type: ignore[attr-defined]
            key = self._space.key(self._space.decode(study))
            if key in free:
                return free[key]
        return int(self._rng.choice(pool))

    def _unmeasured(
        self, done: Sequence[FrozenTrial], busy: Sequence[dict[str, Any]] = ()
    ) -> np.ndarray:
        """Configs neither measured, nor being measured by another worker, nor ruled out."""
        seen = {self._space.key(config_of(t)) for t in done} | {self._space.key(c) for c in busy}
        free = np.array([k not in seen for k in self._keys])
        if self._memory.shape[1]:
            for t in done:
                if t.user_attrs.get(records.FAILURE) in MEMORY_FAILURES:
                    ran_out = _memory_knobs(self._space, config_of(t))
                    free &= ~np.all(self._memory >= ran_out, axis=1)
        return np.flatnonzero(free)

    def _acquisition(
        self,
        done: Sequence[FrozenTrial],
        pool: np.ndarray,
        busy: Sequence[dict[str, Any]] = (),
        model: perf.PerfModel | None = None,
        earlier: warm_start.Prior | None = None,
    ) -> np.ndarray:
        """Expected improvement of log throughput times the chance that every constraint holds.

        One score per config in `pool`; before anything was benchmarked,
        feasibility alone decides. Configs other workers are measuring (`busy`)
        count as measured at the model's own prediction ("kriging believer"):
        their neighbourhood loses the uncertainty their result will remove, so
        simultaneous proposals spread out instead of crowding one region.
        """
        constraints = {t.number: t.constraints for t in done}  # a property that parses attrs
        up = [t for t in done if constraints[t.number].get(SERVER_UP, 0.0) <= 0]
        scored = [t for t in up if (value_of(t) or 0.0) > 0]
        Xp = self._X[pool]
        configs = [self._configs[int(i)] for i in pool]
        if scored:
            values = Posterior.fit(self._space, scored, model, earlier=earlier)
            incumbent = float(np.max(values.predict([config_of(t) for t in scored])[0]))
            if busy:
                values = values.believing(busy)
                # Counted as measured, a running config counts towards the best measured
                # too: else a neighbour of one predicted high keeps its whole improvement
                # over the incumbent, and the hosts stack up along one knob.
                believed = float(np.max(values.predict(list(busy))[0]))
                incumbent = max(incumbent, believed)
            mu, sd = values.predict(configs)
            acq = expected_improvement(mu, sd, incumbent)
        else:
            acq = np.ones(len(pool))
        floor = self._target.floor if self._target is not None else None
        if model is not None and floor is not None and model.capacity_points:
            # The engine's memory rule, not a GP, says which configs run enough requests:
            # from the deployments that differ from each config in its reservation alone.
            chance = [
                capacity.chance_reaches(points, m, floor)
                if (m := self._space.memory_tokens(c)) is not None
                and (points := model.points_for(c))
                else 1.0  # nothing deployed at its other knobs: no evidence to bar it
                for c in configs
            ]
            if all(p is not None for p in chance):
                acq = acq * np.array(chance, dtype=float)
                constraints = {
                    n: {k: v for k, v in c.items() if k != MIN_RUNNING_REQUESTS}
                    for n, c in constraints.items()
                }
        for key in sorted({k for c in constraints.values() for k in c}):
            # "Came up" is known only as 1 (failed) or 0: feasible below one half. Other
            # margins (requests short of the floor, ms over a ceiling) are measured only
            # when the server came up.
            rows = [t for t in (done if key == SERVER_UP else up) if key in constraints[t.number]]
            c = np.array([constraints[t.number][key] for t in rows])
            if c.size < 2 or c.max() <= 0:
                continue  # never violated: nothing to learn about it
            gp_c = GP.fit(self._inputs(rows), c, prior_sd=max(float(np.abs(c).max()), 1e-6))
            cm, cs = gp_c.predict(Xp)
            limit = 0.5 if key == SERVER_UP else 0.0
            acq = acq * normal_cdf((limit - cm) / cs)
        # Ties (all zero, or all one before anything ran) are broken at random.
        return acq + 1e-12 * self._rng.random(len(pool))

    def _inputs(self, trials: Sequence[FrozenTrial]) -> np.ndarray:
        return np.array([features(self._space, config_of(t)) for t in trials])


class Posterior:
    """Log throughput over configs: a GP on the measurements, around the performance
    model's prediction when there is one (the GP then learns only the residual).

    The prediction is combined with what the GP would assume from scratch (the mean of
    the measurements, PRIOR_LOG_SD), each weighed by its precision: where the physics is
    sure (a chain shallower than one deployed) it decides; far from anything deployed
    (a deep wide tree after one chain) its guess counts for less than its optimism.
    """

    def __init__(
        self,
        space: SearchSpace,
        gp: GP,
        model: perf.PerfModel | None = None,
        flat: float = 0.0,
    ) -> None:
        self.space, self.gp, self.model, self.flat = space, gp, model, flat

    @classmethod
    def fit(
        cls,
        space: SearchSpace,
        scored: Sequence[FrozenTrial],
        model: perf.PerfModel | None,
        noise_sd: Sequence[float] = NOISE_SD,
        earlier: warm_start.Prior | None = None,
    ) -> Posterior:
        """`earlier`: an earlier study's measurements, each with its own extra sd (the
        disagreement between the two studies, `warm_start.prior`)."""
        extra = earlier.points if earlier is not None else ()
        configs = [config_of(t) for t in scored] + [c for c, _, _ in extra]
        X = np.array([features(space, c) for c in configs])
        y = np.array([math.log(value_of(t) or 1.0) for t in scored] + [v for _, v, _ in extra])
        sd = point_sd(scored) + [d for _, _, d in extra]
        flat = float(y.mean())
        if model is None or model.predict_many(configs) is None:
            # No model, or a config it cannot place: the GP from scratch.
            gp = GP.fit(X, y, prior_sd=PRIOR_LOG_SD, noise_sd=noise_sd, point_sd=sd)
            return cls(space, gp)
        prior, _ = combined_prior(model, flat, configs)
        gp = GP.fit(X, y - prior, prior_sd=RESIDUAL_PRIOR_SD, noise_sd=noise_sd, point_sd=sd)
        return cls(space, gp, model, flat)

    def predict(self, configs: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
        """Mean and sd of each config's log value."""
        X = np.array([features(self.space, c) for c in configs])
        mu, sd = self.gp.predict(X)
        if self.model is None:
            return mu, sd
        prior, prior_sd = combined_prior(self.model, self.flat, configs)
        # The model's error is what the residual GP learns: beside a measurement it is known
        # as well as the GP knows the residual there, far from every one it is whole. Added
        # whole everywhere, it kept every neighbour of the incumbent uncertain and the study
        # stepped along draft tokens one by one.
        unlearnt = sd / self.gp.scale[1]
        return prior + mu, np.sqrt(sd**2 + (prior_sd * unlearnt) ** 2)

    def believing(self, configs: Sequence[dict[str, Any]]) -> Posterior:
        """The same posterior with `configs` measured at its own prediction ("kriging
        believer"): their neighbourhood loses the uncertainty their results will remove."""
        Xb = np.array([features(self.space, c) for c in configs])
        believed, _ = self.gp.predict(Xb)
        return Posterior(self.space, self.gp.condition(Xb, believed), self.model, self.flat)


def combined_prior(
    model: perf.PerfModel, flat: float, configs: Sequence[dict[str, Any]]
) -> tuple[np.ndarray, np.ndarray]:
    """The model's prediction of each config's log value combined with the flat prior
    (`flat`, PRIOR_LOG_SD) by precision: its mean and sd."""
    predicted = model.predict_many(configs)
    if predicted is None:
        return np.full(len(configs), flat), np.full(len(configs), PRIOR_LOG_SD)
    mu, sd = predicted
    w_model, w_flat = 1.0 / np.maximum(sd, 1e-6) ** 2, 1.0 / PRIOR_LOG_SD**2
    return (mu * w_model + flat * w_flat) / (w_model + w_flat), 1.0 / np.sqrt(w_model + w_flat)


def recommend(
    space: SearchSpace, trials: Sequence[FrozenTrial], target: perf.Target | None = None
) -> FrozenTrial | None:
    """The feasible trial the model believes best: its measurement pooled with its neighbours'.

    One benchmark carries the server's start-to-start noise (about 2 %); the raw
    maximum over many configs is biased towards a lucky draw. Single-objective,
    maximised values only; None when nothing is feasible.
    """
    done = [t for t in measured(trials) if _placeable(space, config_of(t))]
    scored = [t for t in done if (value_of(t) or 0.0) > 0]
    # A pruned trial teaches the model, but only a trial measured at every level is a pick.
    feasible = [t for t in scored if t.state == TrialState.COMPLETE and _feasible(t)]
    if not feasible:
        return None
    model = perf.build(space, target, trials)[0] if target is not None else None
    if len(scored) < 3 and model is None:
        return max(feasible, key=lambda t: (t.values[0], -t.number))
    posterior = Posterior.fit(space, scored, model, RECOMMEND_NOISE_SD)
    mu, _ = posterior.predict([config_of(t) for t in feasible])
    return feasible[int(np.argmax(mu))]


def point_sd(trials: Sequence[FrozenTrial]) -> list[float]:
    """Each trial's own extra noise on log throughput: the standard error its benchmark
    left when a level missed its confidence target (`value_ci`, a 95 % half-width
    relative to the value); 0 for a trial whose levels all met it."""
    out = []
    for t in trials:
        pruned = t.user_attrs.get(PRUNED) if t.state == TrialState.PRUNED else None
        if isinstance(pruned, dict):
            out.append(float(pruned.get("log_sd") or 0.0))
            continue
        uncertain = t.user_attrs.get(records.UNCERTAIN_LEVELS)
        ci = t.user_attrs.get(records.VALUE_CI) if uncertain else None
        out.append(float(ci) / 1.96 if isinstance(ci, (int, float)) and ci > 0 else 0.0)
    return out


def _feasible(t: FrozenTrial) -> bool:
    return all(v <= 0 for v in t.constraints.values())


def _placeable(space: SearchSpace, config: dict[str, Any]) -> bool:
    """Every parameter of the space has a value (a baseline outside the range is clamped)."""
    return bool(config) and space.complete(config)


def _memory_knobs(space: SearchSpace, config: dict[str, Any]) -> list[float]:
    return [float(config.get(n, 0)) for n in space.memory_grows_with]
