"""How long one decode iteration takes, from what each benchmark level showed.

A level of B running requests that emits `tput` tokens/s at `L` tokens per
verify step ran `tput / (B * L)` iterations a second, so it measured the
iteration time `T = B * L / tput` (prefills included, as they stall the
batch). An iteration drafts `steps` times and verifies `B * draft` tokens;
its time is close to linear in what it does:

    T = fixed + per_step * steps + B * (per_request + per_token * draft
                                        + per_draft_token * steps * topk)

The five costs are fitted by Bayesian linear regression (closed form) under
a weak prior scaled to the cheapest level measured: most of a small batch's
time is the fixed cost of a forward pass, a draft step a few percent of it.
One deployment at three levels leaves the split between fixed and per-step
cost to the prior; a second with another depth settles it. The posterior
gives each prediction its standard deviation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Relative error of one level's iteration time (the level's CI and the server's
#: start-to-start speed, about 2 % each).
NOISE = 0.03
#: Prior means and standard deviations of the five costs, as shares of the cheapest
#: level's iteration time.
PRIOR_MEAN = np.array([0.9, 0.03, 0.01, 0.004, 0.001])
PRIOR_SD = np.array([0.5, 0.05, 0.03, 0.01, 0.004])


@dataclass(frozen=True)
class Timed:
    """One measured level: the draft shape, the batch it ran and its iteration time (s)."""

    steps: int
    topk: int
    draft: int
    batch: float
    seconds: float


def features(steps: int, topk: int, draft: int, batch: float) -> np.ndarray:
    verify = draft if steps > 0 else 1
    return np.array([1.0, steps, batch, batch * verify, batch * steps * topk])


@dataclass(frozen=True)
class StepCost:
    mean: np.ndarray
    cov: np.ndarray
    levels: int
    """Levels fitted on."""

    @classmethod
    def fit(cls, timed: Sequence[Timed]) -> StepCost | None:
        rows = [t for t in timed if t.seconds > 0 and t.batch > 0]
        if not rows:
            return None
        scale = min(rows, key=lambda t: (t.batch, t.seconds)).seconds
        X = np.array([features(t.steps, t.topk, t.draft, t.batch) for t in rows])
        y = np.array([t.seconds for t in rows])
        w = 1.0 / (NOISE * y) ** 2
        prior_prec = np.diag(1.0 / (PRIOR_SD * scale) ** 2)
        precision = prior_prec + X.T @ (X * w[:, None])
        cov = np.linalg.inv(precision)
        mean = cov @ (prior_prec @ (PRIOR_MEAN * scale) + X.T @ (w * y))
        return cls(mean, cov, len(rows))

    def predict(self, steps: int, topk: int, draft: int, batch: float) -> tuple[float, float]:
        """Iteration time (s) and its standard deviation."""
        x = features(steps, topk, draft, batch)
        # A cost cannot be negative; the floor keeps a poorly fitted direction from
        # predicting an iteration that takes no time.
        t = max(float(x @ self.mean), 0.05 * float(x @ np.abs(self.mean)), 1e-9)
        return t, float(np.sqrt(max(x @ self.cov @ x, 0.0)))
