"""The performance model: what a deployment would show, predicted from the measured ones.

`model.PerfModel` combines capacity (`autotune/search/capacity.py`), acceptance per
position (`acceptance.py`) and step cost (`step_cost.py`); `model.build` fits it to a
study's trials and checks it before the sampler trusts it.
"""

from .acceptance import Acceptance, Seen, reach_from_histogram, tree_accept_dist
from .model import PREDICTED, STATUS, Deployed, PerfModel, Prediction, Target, build, describe
from .step_cost import StepCost, Timed

__all__ = [
    "PREDICTED",
    "STATUS",
    "Acceptance",
    "Deployed",
    "PerfModel",
    "Prediction",
    "Seen",
    "StepCost",
    "Target",
    "Timed",
    "build",
    "describe",
    "reach_from_histogram",
    "tree_accept_dist",
]
