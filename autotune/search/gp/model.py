"""A small Gaussian-process regressor in numpy: Matern 5/2, hyperparameters chosen on a grid.

Tens of points in a handful of dimensions: fitting by marginal likelihood over
a fixed grid of length scales and noise levels is exact enough, deterministic,
and needs neither PyTorch nor an optimiser.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

#: Length scales tried per input (inputs are in [0, 1]).
LENGTH_SCALES = (0.15, 0.3, 0.6, 1.2, 2.4)
#: Centre of a weak log-normal prior on length scales: a knob's effect on
#: throughput is smooth and unimodal, so a handful of points should not be
#: explained by wiggles.
PRIOR_SCALE = 0.6
#: Noise variances tried when the caller gives none, relative to the data's variance.
RELATIVE_NOISES = (0.03, 0.1, 0.3)
#: Above this many inputs one length scale is shared by all (the grid would grow as 5^d).
MAX_SEPARATE_SCALES = 4


class GP:
    """Zero-mean GP on standardised y, one length scale per input."""

    def __init__(
        self,
        X: np.ndarray,
        z: np.ndarray,
        scale: tuple[float, float],
        length_scales: np.ndarray,
        noise: float,
        extra_noise: np.ndarray | None = None,
    ) -> None:
        self.X, self.z, self.scale, self.ls, self.noise = X, z, scale, length_scales, noise
        extra = np.zeros(len(X)) if extra_noise is None else extra_noise
        self.extra = extra
        K = matern(sqdist(X, X, self.ls)) + np.diag(noise + extra)
        self.L = np.linalg.cholesky(K)
        self.alpha = np.linalg.solve(self.L.T, np.linalg.solve(self.L, z))

    @classmethod
    def fit(
        cls,
        X: np.ndarray,
        y: np.ndarray,
        *,
        prior_sd: float,
        noise_sd: Sequence[float] | None = None,
        point_sd: Sequence[float] | None = None,
    ) -> GP:
        """Choose length scales and noise by marginal likelihood times a weak prior.

        `prior_sd` is how much y is expected to vary across the space: it stands
        in for the spread of the data while there are fewer than three points.
        `noise_sd` are the measurement noise levels to try, in the units of y.
        `point_sd` is each point's own known measurement error on top (a benchmark
        level that missed its confidence target says how uncertain it is).
        """
        mean, std = float(y.mean()), float(y.std())
        std = std if len(y) >= 3 and std > 1e-9 else prior_sd
        z = (y - mean) / std
        n, d = X.shape
        if d <= MAX_SEPARATE_SCALES:
            scales = np.array(list(itertools.product(LENGTH_SCALES, repeat=d)))
        else:
            scales = np.repeat(np.array(LENGTH_SCALES)[:, None], d, axis=1)
        if noise_sd is None:
            noises = np.array(RELATIVE_NOISES)
        else:
            noises = np.maximum((np.asarray(noise_sd) / std) ** 2, 1e-6)
        extra = np.zeros(len(y)) if point_sd is None else (np.asarray(point_sd) / std) ** 2
        diffs = (X[:, None, :] - X[None, :, :]) ** 2  # (n, n, d)
        kernels = matern(np.einsum("ijk,mk->mij", diffs, 1.0 / scales**2))  # (m, n, n)
        K = kernels[:, None] + noises[None, :, None, None] * np.eye(n) + np.diag(extra)
        L = np.linalg.cholesky(K.reshape(-1, n, n))
        a = np.linalg.solve(L, np.broadcast_to(z[:, None], (len(L), n, 1)))[..., 0]
        logdet = np.sum(np.log(np.diagonal(L, axis1=1, axis2=2)), axis=1)
        prior = np.repeat(-0.5 * np.sum(np.log(scales / PRIOR_SCALE) ** 2, axis=1), len(noises))
        best = int(np.argmax(-0.5 * np.sum(a * a, axis=1) - logdet + prior))
        ls, noise = scales[best // len(noises)], float(noises[best % len(noises)])
        return cls(X, z, (mean, std), ls, noise, extra)

    def condition(self, Xn: np.ndarray, yn: np.ndarray) -> GP:
        """The same GP (hyperparameters, scaling) with points added at values `yn` (units of y)."""
        mean, std = self.scale
        X = np.vstack([self.X, Xn])
        z = np.concatenate([self.z, (np.asarray(yn) - mean) / std])
        extra = np.concatenate([self.extra, np.zeros(len(Xn))])
        return GP(X, z, self.scale, self.ls, self.noise, extra)

    def predict(self, Xp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the latent function, in the units of y."""
        ks = matern(sqdist(Xp, self.X, self.ls))
        mu = ks @ self.alpha
        v = np.linalg.solve(self.L, ks.T)
        var = np.clip(1.0 - np.sum(v * v, axis=0), 1e-12, None)
        mean, std = self.scale
        return mean + std * mu, std * np.sqrt(var)

    def joint(self, Xp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and covariance of the latent function at `Xp`, in the units of y.

        Neighbouring configs share their uncertainty; judging which of several is
        best needs that, not only each one's own spread.
        """
        ks = matern(sqdist(Xp, self.X, self.ls))
        v = np.linalg.solve(self.L, ks.T)
        cov = matern(sqdist(Xp, Xp, self.ls)) - v.T @ v
        mean, std = self.scale
        return mean + std * (ks @ self.alpha), std * std * (cov + 1e-9 * np.eye(len(Xp)))


def sqdist(A: np.ndarray, B: np.ndarray, ls: np.ndarray) -> np.ndarray:
    return np.sum(((A[:, None, :] - B[None, :, :]) / ls) ** 2, axis=-1)


def matern(r2: np.ndarray) -> np.ndarray:
    r = np.sqrt(5.0 * np.maximum(r2, 0.0))
    return (1.0 + r + r * r / 3.0) * np.exp(-r)


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    u = (mu - best) / sd
    return sd * (u * normal_cdf(u) + np.exp(-0.5 * u * u) / math.sqrt(2 * math.pi))


_erf = np.frompyfunc(math.erf, 1, 1)


def normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + _erf(np.asarray(x) / math.sqrt(2.0)).astype(float))
