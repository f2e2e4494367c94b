"""Scaling statistics fitted on training rows only."""
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StandardScale:
    """Per-channel mean and population std of the training rows: what sklearn's StandardScaler computes,
    without importing sklearn, which every run's start-up would pay for (docs/performance.md)."""
    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, rows: np.ndarray, skip_missing: bool = False) -> "StandardScale":
        """skip_missing: statistics of the values present, per channel (sklearn ignores NaNs alike)."""
        rows = np.asarray(rows, dtype=np.float64)
        mean, var = (np.nanmean(rows, axis=0), np.nanvar(rows, axis=0)) if skip_missing \
            else (rows.mean(axis=0), rows.var(axis=0))
        # a channel whose variance is within the rounding error of the two-pass variance is constant: it is
        # centred, not divided by ~0 (sklearn's test, Chan, Golub & LeVeque)
        eps = np.finfo(np.float64).eps
        n = np.sum(~np.isnan(rows), axis=0) if skip_missing else len(rows)
        constant = var <= n * eps * var + (n * mean * eps) ** 2
        return cls(mean, np.where(constant, 1.0, np.sqrt(var)))

    def transform(self, values: np.ndarray) -> np.ndarray:
        return (values - self.mean) / self.std
