"""autotune's own Bayesian optimisation: a GP over the enumerated configs of a small space."""

from .model import GP
from .sampler import (
    PRIOR_LOG_SD,
    PRUNED,
    RESIDUAL_PRIOR_SD,
    EnumeratedGPSampler,
    Posterior,
    config_of,
    measured,
    point_sd,
    recommend,
    value_of,
)

__all__ = [
    "GP",
    "PRIOR_LOG_SD",
    "PRUNED",
    "RESIDUAL_PRIOR_SD",
    "EnumeratedGPSampler",
    "Posterior",
    "config_of",
    "measured",
    "point_sd",
    "recommend",
    "value_of",
]
