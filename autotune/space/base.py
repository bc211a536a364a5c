"""The search space's core, which every view builds on: its parameters in dependency order,
their conditions and bounds, and the rules by which the engine adjusts a config."""

from __future__ import annotations

from collections.abc import Mapping

from autotune import expr
from autotune.space.values import (
    Candidate,
    DraftShape,
    Param,
    Params,
    Rule,
    Value,
    coerce,
    dependency_order,
    holds,
)


class SpaceBase:
    def __init__(
        self,
        source: str,
        engine: str | None,
        params: list[Param],
        rules: list[Rule],
        memory_grows_with: tuple[str, ...] = (),
        memory_per_request: expr.Expr | None = None,
        draft_shape: DraftShape | None = None,
    ):
        self.source = source
        self.engine = engine
        self.params = {p.name: p for p in params}
        self.rules = rules
        self.memory_grows_with = memory_grows_with
        """Knobs whose every increase costs memory (see the space file's `memory_grows_with`)."""
        self.memory_per_request = memory_per_request
        """KV tokens the engine reserves per running request for a config (the space file's
        `memory_per_request`); the capacity predictor's input (`autotune/search/capacity.py`)."""
        self.draft_shape = draft_shape
        """How a config's knobs shape the draft (the space file's `draft_shape`): the
        performance model's input (`autotune/search/perf/`)."""
        self._enumerated: list[Candidate] | None = None  # a space never changes once parsed
        self.order = dependency_order(source, self.params)

    def applies(self, name: str, config: Mapping[str, Value]) -> bool:
        """Whether parameter `name` has a value in `config` (its `when` holds).

        A condition over a parameter that itself does not apply is false.
        """
        p = self.params[name]
        if p.when is None:
            return True
        if not p.when.names <= config.keys():
            return False
        return bool(p.when(config))

    def complete(self, config: Mapping[str, Value]) -> bool:
        """Every parameter that applies to `config` has a value in it."""
        return all(n in config for n in self.order if self.applies(n, config))

    def apply_rules(self, config: Params) -> Params:
        out = dict(config)
        for rule in self.rules:
            if rule.set and holds(rule.when, out):
                for name, e in rule.set.items():
                    if name in out and e.names <= out.keys():
                        out[name] = coerce(self.params[name], e(out))
        return out

    def check(self, config: Mapping[str, Value]) -> str | None:
        """Why `config` is not valid for this space, or None."""
        for name in self.order:
            p = self.params[name]
            if not self.applies(name, config):
                continue
            v = config.get(name)
            if v is None:
                return f"{name} is missing"
            if p.choices is not None and v not in p.choices and not p.fixed:
                return f"{name}={v} is not one of {list(p.choices)}"
            if p.low is not None and p.high is not None:
                lo, hi = self._bounds(p, config)
                adjusted = p.name in self._set_by_rules(config)
                if p.dependent_range and not adjusted and not lo <= v <= hi:  # type: ignore[operator]
                    return f"{name}={v} is outside [{lo}, {hi}]"
        for rule in self.rules:
            applies = rule.require is not None and holds(rule.when, config)
            if applies and rule.require.names <= config.keys() and not rule.require(config):  # type: ignore[union-attr]
                return rule.why
        return None

    def _set_by_rules(self, config: Mapping[str, Value]) -> set[str]:
        names: set[str] = set()
        for rule in self.rules:
            if rule.set and holds(rule.when, config):
                names |= set(rule.set)
        return names

    def bounds(self, name: str, config: Mapping[str, Value]) -> tuple[int, int]:
        """The integer range of parameter `name` given the values it depends on."""
        return self._bounds(self.params[name], config)

    def _bounds(self, p: Param, config: Mapping[str, Value]) -> tuple[int, int]:
        lo = int(p.low(config))  # type: ignore[misc]
        hi = int(p.high(config))  # type: ignore[misc]
        return lo, max(lo, hi)
