"""Metrics and reductions: per-window errors summed exactly, global means, slow ranks, MASE and MSIS."""
import math

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from data_provider.factory import seasonality
from utils import losses, metrics
from utils.dist import global_mean, slow_ranks
from utils.metrics import metrics_from_windows, window_errors


def test_metrics_from_window_errors_equal_whole_array_metrics_and_shards_change_nothing():
    pred, true = torch.randn(37, 6, 2), torch.randn(37, 6, 2) + 3
    errors = window_errors(pred, true)
    whole = metrics_from_windows(errors)
    p, t = pred.double().numpy(), true.double().numpy()
    assert whole["mse"] == pytest.approx(np.mean((p - t) ** 2), rel=1e-12)
    assert whole["mape"] == pytest.approx(np.mean(np.abs((p - t) / t)), rel=1e-12)
    assert whole["rmse"] == pytest.approx(math.sqrt(whole["mse"]))
    assert errors[:, 0].numpy() == pytest.approx(((p - t) ** 2).mean(axis=(1, 2)), rel=1e-12)
    parts = torch.cat([window_errors(pred[s], true[s]) for s in (slice(0, 10), slice(10, 11), slice(11, 37))])
    assert torch.equal(parts.nan_to_num(), errors.nan_to_num())  # a window's errors: not its batch's


def test_global_mean_single_process_is_sum_over_count():
    assert global_mean(torch.tensor(6.0), torch.tensor(4)).item() == 1.5


def test_slow_ranks_are_those_beyond_one_and_a_half_medians():
    assert slow_ranks([1.0, 1.1, 0.9, 2.0]) == [3]
    assert slow_ranks([1.0, 1.4]) == [] and slow_ranks([1.0]) == []


@pytest.mark.parametrize("freq,season", [("h", 24), ("15min", 96), ("10min", 144), ("2h", 12), ("7min", 1),
                                         ("D", 1), ("W", 1), ("MS", 12), ("QS", 4), ("YS", 1)])
def test_the_season_is_gluonts_for_the_datas_step(freq, season):
    assert seasonality(pd.date_range("2020-01-01", periods=40, freq=freq)) == season
    assert seasonality(None) == 1


def test_mase_and_msis_divide_by_the_seasonal_naive_error_of_each_windows_input():
    torch.manual_seed(0)
    x, true = torch.randn(6, 48, 2, dtype=torch.float64), torch.randn(6, 8, 2, dtype=torch.float64)
    out = torch.randn(6, 8, 2, 2, dtype=torch.float64)
    names = metrics.names()
    gaussian = losses.objective("gaussian", metrics.GRID)
    found = dict(zip(names, metrics.window_errors(gaussian.forecast(out).given(x, 24), true).T))
    scale = (x[:, 24:] - x[:, :-24]).abs().mean(1, keepdim=True)
    mu, sigma = out[..., 0], F.softplus(out[..., 1] - out[..., 0]) + losses.SCALE_FLOOR
    assert torch.allclose(found["mase"], ((mu - true).abs() / scale).mean((1, 2)))
    low, high = mu - 1.959963984540054 * sigma, mu + 1.959963984540054 * sigma
    interval = high - low + 40 * ((low - true).clamp(min=0) + (true - high).clamp(min=0))
    assert torch.allclose(found["msis"], (interval / scale).mean((1, 2)))
    point = dict(zip(names, metrics.window_errors(metrics.point_forecast(mu).given(x, 24), true).T))
    assert torch.allclose(point["msis"], 40 * point["mase"], rtol=1e-12)
    # a lookback no longer than the season scales by the naive (m = 1) error; the standardisation changes nothing
    short = dict(zip(names, metrics.window_errors(metrics.point_forecast(mu).given(x[:, :20], 24), true).T))
    naive = (x[:, 1:20] - x[:, :19]).abs().mean(1, keepdim=True)
    assert torch.allclose(short["mase"], ((mu - true).abs() / naive).mean((1, 2)))
    moved = dict(zip(names, metrics.window_errors(metrics.point_forecast(3 * mu + 1).given(3 * x + 1, 24),
                                                  3 * true + 1).T))
    assert torch.allclose(moved["mase"], point["mase"])
