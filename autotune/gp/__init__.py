"""autotune's own Bayesian optimisation: a GP over the enumerated configs of a small space."""

from .sampler import EnumeratedGPSampler, recommend

__all__ = ["EnumeratedGPSampler", "recommend"]
