"""CRPS from samples, for forecasts made of them (--num_samples: sample paths of a distribution, drawn ancestrally
through rolled-out forecasts), per point:

  crps_sample   the energy form E|X - y| - E|X - X'| / 2 over the S samples (all S^2 pairs, as properscoring's
                crps_ensemble and scoringrules' "nrg" estimator), computed from the sorted samples in O(S log S):
                sum_ij |x_i - x_j| = 2 sum_i (2i - S - 1) x_(i). A point forecast is a point mass: its absolute
                error, the MAE. NaN for a forecast without samples (quantile outputs, or a distribution not
                sampled): its CRPS is `crps`, on the --quantiles grid.
"""
import torch

from utils.metrics import Metric


def crps_sample(forecast, true):
    if forecast.point_mass:
        return (forecast.point - true).abs()
    x = forecast.samples
    if x is None:
        return torch.full_like(true, float("nan"))
    S = x.shape[-1]
    rank_weights = 2 * torch.arange(1, S + 1, dtype=x.dtype, device=x.device) - S - 1
    half_spread = (x * rank_weights).sum(-1) / S ** 2
    return (x - true.unsqueeze(-1)).abs().mean(-1) - half_spread


METRICS = [Metric("crps_sample", crps_sample, probabilistic=True, std_power=1,
                  help="CRPS of the samples, energy form (--num_samples; a point forecast's: its MAE)")]
