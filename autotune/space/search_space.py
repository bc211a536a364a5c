"""The search space as its clients use it: one object, its jobs in one view each."""

from __future__ import annotations

from autotune.space.physics_view import PhysicsView
from autotune.space.sampler_view import SamplerView
from autotune.space.unit_view import UnitView


class SearchSpace(SamplerView, UnitView, PhysicsView):
    """A search space: `sampler_view` for the sampler, `unit_view` for the unit writer,
    `physics_view` for the engine physics, `base` under them all (built by `schema`)."""
