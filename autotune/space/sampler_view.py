"""For the sampler (`search/`): the distributions Optuna sees, a config encoded to them and
decoded back, every config listed.

Encoding for Optuna: multivariate TPE and GP model only parameters whose distribution is
the same in every trial. A parameter with a dependent bound is therefore suggested as its
*position* inside the valid range, a float in [0, 1] named `<name>_frac`, and mapped to an
integer of that range. Every proposal is then valid by construction and the sampler still
models all knobs jointly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from autotune.errors import ConfigError
from autotune.space.base import SpaceBase
from autotune.space.values import (
    ENUMERABLE_LIMIT,
    Candidate,
    Param,
    Params,
    Value,
    coerce,
    from_fraction,
    to_fraction,
)


class SamplerView(SpaceBase):
    def distributions(self) -> dict[str, BaseDistribution]:
        """The sampler's coordinates: the same distributions in every trial."""
        dists: dict[str, BaseDistribution] = {}
        for name in self.order:
            p = self.params[name]
            if p.fixed:
                continue
            if p.dependent_range:
                dists[p.study_name] = FloatDistribution(0.0, 1.0)
            elif p.choices is not None:
                dists[p.study_name] = CategoricalDistribution(p.choices)
            elif p.type == "int":
                dists[p.study_name] = IntDistribution(
                    int(p.low({})),
                    int(p.high({})),
                    log=p.log,  # type: ignore[misc]
                )
            else:
                dists[p.study_name] = FloatDistribution(
                    float(p.low({})),
                    float(p.high({})),
                    log=p.log,  # type: ignore[misc]
                )
        return dists

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Ask the trial for every coordinate; returns the study params."""
        out: dict[str, Any] = {}
        for name, dist in self.distributions().items():
            if isinstance(dist, CategoricalDistribution):
                out[name] = trial.suggest_categorical(name, dist.choices)
            elif isinstance(dist, IntDistribution):
                out[name] = trial.suggest_int(name, dist.low, dist.high, log=dist.log)
            else:
                assert isinstance(dist, FloatDistribution)
                out[name] = trial.suggest_float(name, dist.low, dist.high, log=dist.log)
        return out

    def decode(self, study_params: Mapping[str, Any]) -> Params:
        """Study params -> the config the engine will run (rules' adjustments applied)."""
        config: Params = {}
        for name in self.order:
            p = self.params[name]
            if not self.applies(name, config):
                continue
            if p.fixed:
                config[name] = coerce(p, p.value(config))  # type: ignore[misc]
            elif p.dependent_range:
                lo, hi = self._bounds(p, config)
                config[name] = from_fraction(float(study_params[p.study_name]), lo, hi, p.log)
            else:
                config[name] = study_params[p.study_name]
        return self.apply_rules(config)

    def encode(self, config: Mapping[str, Value]) -> dict[str, Any]:
        """A config (e.g. the unit's current flags) -> study params that decode to it."""
        study: dict[str, Any] = {}
        known: Params = {}
        for name in self.order:
            p = self.params[name]
            if not self.applies(name, known):
                continue  # its coordinate is left to the sampler: the value is never used
            if name not in config:
                raise KeyError(name)
            v = coerce(p, config[name])
            known[name] = v
            if p.fixed:
                continue
            if p.dependent_range:
                lo, hi = self._bounds(p, known)
                study[p.study_name] = to_fraction(int(v), lo, hi, p.log)
            else:
                study[p.study_name] = v
        return study

    def key(self, config: Mapping[str, Value]) -> tuple[tuple[str, Value], ...]:
        """Identity of a config, for recognising one that was measured already."""
        return tuple((n, config[n]) for n in self.order if n in config)

    def enumerate(self) -> list[Candidate]:
        """Every distinct configuration the space can propose, in a stable order."""
        if self._enumerated is None:
            self._enumerated = self._walk_all()
        return list(self._enumerated)

    def _walk_all(self) -> list[Candidate]:
        seen: dict[tuple[tuple[str, Value], ...], Candidate] = {}

        def walk(i: int, config: Params) -> None:
            if i == len(self.order):
                final = self.apply_rules(config)
                k = self.key(final)
                if k not in seen:
                    reason = self.check(final)
                    seen[k] = Candidate(final, reason is None, reason)
                return
            p = self.params[self.order[i]]
            if not self.applies(p.name, config):
                walk(i + 1, config)
                return
            for v in self._values(p, config):
                config[p.name] = v
                walk(i + 1, config)
            config.pop(p.name, None)

        walk(0, {})
        return list(seen.values())

    def _values(self, p: Param, config: Params) -> list[Value]:
        if p.fixed:
            return [coerce(p, p.value(config))]  # type: ignore[misc]
        if p.choices is not None:
            return list(p.choices)
        if p.type != "int":
            raise ConfigError(
                self.source, f"params.{p.name}", "a float range cannot be enumerated; give choices"
            )
        lo, hi = self._bounds(p, config)
        return list(range(lo, hi + 1))

    def size(self) -> int:
        return len(self.enumerate())

    def enumerable(self, limit: int = ENUMERABLE_LIMIT) -> bool:
        """True when every config can be listed (no float range) and there are at most `limit`."""
        for p in self.params.values():
            if p.type == "float" and p.choices is None and not p.fixed:
                return False
        return self.size() <= limit
