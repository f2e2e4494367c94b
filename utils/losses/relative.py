"""Losses relative to the series' level, for series on their original scale (the short-term task, M4): TSLib's
MAPE, sMAPE and MASE losses (utils/losses.py there, from N-BEATS's), per point, a division by zero counted as 0:

  mape    |f - y| / |y|
  smape   200 |f - y| / (|f| + |y|), the denominator held constant in the gradient (TSLib's .data)
  mase    |f - y| / the mean of |x_t - x_(t-m)| over the window's input x, m the data's season (1 where the
          input is not longer than it)
"""
import torch

from utils.losses import Loss


def _ratio(numerator: torch.Tensor, denominator: torch.Tensor) -> torch.Tensor:
    """numerator / denominator, 0 where that is not finite (TSLib's divide_no_nan)."""
    out = numerator / denominator
    return out.masked_fill(~torch.isfinite(out), 0.0)


def mape(pred: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    return _ratio((pred - true).abs(), true.abs()).mean()


def smape(pred: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    return 200 * _ratio((pred - true).abs(), (pred.detach().abs() + true.abs())).mean()


def mase(pred: torch.Tensor, true: torch.Tensor, insample: torch.Tensor, season: int) -> torch.Tensor:
    m = season if season < insample.shape[1] else 1
    scale = (insample[:, m:] - insample[:, :-m]).abs().mean(1, keepdim=True)
    return _ratio((pred - true).abs(), scale).mean()


LOSSES = [
    Loss("mape", mape, help="mean absolute percentage error (TSLib's MAPE loss), for data on its original scale"),
    Loss("smape", smape, help="symmetric MAPE, in percent (TSLib's SMAPE loss; M4)"),
    Loss("mase", mase, reads_input=True,
         help="absolute error over the seasonal-naive error of the window's input (TSLib's MASE loss; M4)"),
]
