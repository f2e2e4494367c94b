"""Metrics scaled by the seasonal-naive forecast's error, as GIFT-Eval (MASE) and the M4 competition (MSIS) define
them, per point, with the scale taken over each window's input (GluonTS's in-sample history of a test instance):
the mean of |x_t - x_(t-m)| over the lookback, m the series' season (data_provider/factory.py: seasonality; 1
where the lookback is not longer than it), per window and channel; in the short-term task (M4) over each series'
whole training history instead, as the competition's MASE. A window whose input does not change has no scale: NaN.

  mase   |y - f| / scale, f the point forecast (the median of quantiles, the mean of a distribution);
  msis   the interval score of the central 95% interval (l, u) = quantiles 0.025 and 0.975, divided by the scale:
         (u - l) + 40 (l - y) where y < l + 40 (y - u) where y > u. A point forecast's interval is the point (40 x
         MASE); NaN for a quantile model whose --quantiles lack 0.025 and 0.975.
Both are invariant to each channel's standardisation: the scaled data give the original scale's values.
"""
import torch

from utils.metrics import Metric

ALPHA = 0.05  # the M4 competition's: the 95% interval


def seasonal_scale(forecast) -> torch.Tensor:
    """(windows, 1, channels): the mean absolute seasonal difference of each window's input, or the scale the
    data give (the short-term task: of the series' whole training history, as M4's MASE)."""
    if forecast.scale is not None:
        return forecast.scale
    x = forecast.insample
    if x is None:
        return torch.full_like(forecast.point[:, :1], float("nan"))
    m = forecast.season if forecast.season < x.shape[1] else 1
    scale = (x[:, m:] - x[:, :-m]).abs().mean(1, keepdim=True)
    return scale.masked_fill(scale == 0, float("nan"))


def mase(forecast, true):
    return (forecast.point - true).abs() / seasonal_scale(forecast)


def msis(forecast, true):
    bounds = forecast.quantile(torch.tensor([ALPHA / 2, 1 - ALPHA / 2], dtype=torch.float64))
    low, high = bounds[..., 0], bounds[..., 1]
    score = high - low + 2 / ALPHA * ((low - true).clamp(min=0) + (true - high).clamp(min=0))
    return score / seasonal_scale(forecast)


METRICS = [
    Metric("mase", mase, probabilistic=True, std_power=0,
           help="absolute error over the seasonal-naive error of the window's input"),
    Metric("msis", msis, probabilistic=True, std_power=0,
           help="interval score of the central 95% interval, seasonally scaled"),
]
