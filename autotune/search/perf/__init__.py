"""The performance model: what a deployment would show, predicted from the measured ones.

`model.PerfModel` combines capacity (`autotune/search/capacity.py`), acceptance per
position (`acceptance.py`) and step cost (`step_cost.py`); `model.build` fits it to a
study's trials and checks it before the sampler trusts it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .acceptance import Acceptance, Seen, reach_from_histogram, tree_accept_dist
from .step_cost import StepCost, Timed

if TYPE_CHECKING:
    from .model import PREDICTED, STATUS, Deployed, PerfModel, Prediction, Target, build, describe

_MODEL = ("PREDICTED", "STATUS", "Deployed", "PerfModel", "Prediction", "Target", "build",
          "describe")  # fmt: skip

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


def __getattr__(name: str) -> Any:
    # The model (Optuna, the search space) is imported when first used: the simulator reads
    # acceptance.py at every start and must not pay for it.
    if name in (*_MODEL, "model"):
        model = importlib.import_module(f"{__name__}.model")
        return model if name == "model" else getattr(model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
