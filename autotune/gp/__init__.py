"""autotune's own Bayesian optimisation: a GP over the enumerated configs of a small space."""

from .model import GP
from .sampler import PRIOR_LOG_SD, EnumeratedGPSampler, config_of, measured, point_sd, recommend

__all__ = [
    "GP",
    "PRIOR_LOG_SD",
    "EnumeratedGPSampler",
    "config_of",
    "measured",
    "point_sd",
    "recommend",
]
