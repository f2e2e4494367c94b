"""Probabilistic metrics, from quantile forecasts (GIFT-Eval's and fev's definitions, per point, on scaled data):

  crps          the CRPS approximated on the run's quantile grid (--quantiles): twice the mean pinball loss over
                its levels. A point forecast is a point mass, whose CRPS is its absolute error: the MAE (what the
                grid gives too, when it is symmetric about 0.5 as the default 0.1, ..., 0.9 is).
  coverage_P    the share of points inside the central P% interval (quantiles (1 - P/100)/2 and (1 + P/100)/2);
  width_P       that interval's mean width. NaN where a quantile model's grid does not reach those levels: its
                tails beyond the outermost level are unknown (0.05 and 0.95 for the 90% interval).
"""
import torch

from utils.metrics import Metric

INTERVALS = (50, 80, 90)


def crps(forecast, true):
    return forecast.memo("crps", true, lambda: _crps(forecast, true))  # ncrps reads it too


def _crps(forecast, true):
    if forecast.point_mass:  # what the grid gives on any grid symmetric about 0.5, without its levels' tensors
        return (forecast.point - true).abs()
    levels = forecast.grid.to(true.device)
    error = true.unsqueeze(-1) - forecast.quantile(levels)
    return 2 * (error * (levels - (error < 0).double())).mean(-1)  # the pinball loss: q e, or (q - 1) e below


def _bounds(forecast, percent: int):
    half = percent / 200
    bounds = forecast.quantile(torch.tensor([0.5 - half, 0.5 + half], dtype=torch.float64))
    return bounds[..., 0], bounds[..., 1]


def coverage(percent: int):
    def per_point(forecast, true):
        if forecast.point_mass:  # an interval of no width holds only the points forecast exactly
            return (forecast.point == true).double()
        low, high = _bounds(forecast, percent)
        inside = ((true >= low) & (true <= high)).double()
        return inside.masked_fill(low.isnan() | high.isnan(), float("nan"))
    return per_point


def width(percent: int):
    def per_point(forecast, true):
        if forecast.point_mass:
            return torch.zeros_like(true)
        low, high = _bounds(forecast, percent)
        return high - low
    return per_point


METRICS = [
    Metric("crps", crps, probabilistic=True, std_power=1,
           help="CRPS on the --quantiles grid (a point forecast's: its MAE)"),
    *(Metric(f"coverage_{p}", coverage(p), probabilistic=True, std_power=0,
             help=f"share of points in the central {p}% interval") for p in INTERVALS),
    *(Metric(f"width_{p}", width(p), probabilistic=True, std_power=1, help=f"mean width of the central {p}% interval")
      for p in INTERVALS),
]
