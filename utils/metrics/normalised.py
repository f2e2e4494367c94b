"""Errors relative to the size of the target, per window, as ProbTS reports them (and GluonTS's ND and weighted
quantile loss): a window's sum of errors over all its points (time and channels) divided by its sum of |y|,
then averaged over windows. They depend on where zero is, so they mean something on the original scale
(nmae_original, ncrps_original); on the standardised data they are reported alike. NaN for a window whose
target is zero throughout.

  nmae    sum |y - median| / sum |y|: the median of quantiles, of a distribution or of samples (a point forecast:
          the point);
  ncrps   sum crps / sum |y|: the CRPS on the --quantiles grid (ProbTS's CRPS with --quantiles 0.05,0.1,...,0.95,
          its 19 levels); a point forecast's equals its nmae.
"""
import torch

from utils.metrics import Metric
from utils.metrics.probabilistic import crps

MEDIAN = torch.tensor([0.5], dtype=torch.float64)


def _size(true: torch.Tensor) -> torch.Tensor:
    """Each window's mean |y| over its points: a point's value divided by it averages to the window's ratio."""
    size = true.abs().flatten(1).mean(1).view(-1, *(1,) * (true.dim() - 1))
    return size.masked_fill(size == 0, float("nan"))


def nmae(forecast, true):
    median = forecast.point if forecast.point_mass else forecast.quantile(MEDIAN)[..., 0]
    return (median - true).abs() / _size(true)


def ncrps(forecast, true):
    return crps(forecast, true) / _size(true)


METRICS = [
    Metric("nmae", nmae, probabilistic=True, help="sum |error of the median| / sum |y| of a window (ProbTS's NMAE)"),
    Metric("ncrps", ncrps, probabilistic=True, help="sum crps / sum |y| of a window (ProbTS's CRPS)"),
]
