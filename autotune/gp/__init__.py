"""autotune's own Bayesian optimisation: a GP over the enumerated configs of a small space."""

from .sampler import EnumeratedGPSampler, config_of, recommend

__all__ = ["EnumeratedGPSampler", "config_of", "recommend"]
