"""For the engine physics (`search/capacity.py`, `search/perf/`): the KV tokens a config
reserves per running request and the shape of the draft it builds, as the server runs it."""

from __future__ import annotations

from collections.abc import Mapping

from autotune.space.base import SpaceBase
from autotune.space.values import Value


class PhysicsView(SpaceBase):
    def memory_tokens(self, config: Mapping[str, Value]) -> float | None:
        """`memory_per_request` of a config as the server will run it (rules applied), or
        None when the space does not say or the config lacks a knob it needs."""
        e = self.memory_per_request
        resolved = self.apply_rules(dict(config))
        if e is None or not e.names <= resolved.keys():
            return None
        return float(e(resolved))

    def shape(self, config: Mapping[str, Value]) -> tuple[int, int, int] | None:
        """(steps, topk, draft tokens) of a config as the server will run it, or None when
        the space has no `draft_shape` or the config lacks a knob it needs."""
        d = self.draft_shape
        if d is None:
            return None
        resolved = self.apply_rules(dict(config))
        if not d.names <= resolved.keys():
            return None
        try:
            return int(d.steps(resolved)), int(d.topk(resolved)), int(d.draft(resolved))
        except (TypeError, ValueError, ArithmeticError):
            return None
