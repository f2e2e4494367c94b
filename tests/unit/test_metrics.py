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


def test_metrics_on_the_original_scale_are_the_metrics_of_the_forecast_mapped_back():
    """x * std + mean of every channel: each metric computed anew on the mapped forecast, inputs and targets, and
    the scale-free ones (coverage, MASE, MSIS) as they were."""
    torch.manual_seed(1)
    x, true, out = (torch.randn(5, 48, 3, dtype=torch.float64), torch.randn(5, 8, 3, dtype=torch.float64),
                    torch.randn(5, 8, 3, 3, dtype=torch.float64))
    std = torch.tensor([2.0, 0.5, 10.0], dtype=torch.float64)
    mean = torch.tensor([1.0, -3.0, 40.0], dtype=torch.float64)
    student = losses.objective("student_t", (0.025, 0.1, 0.5, 0.9, 0.975))
    forecast = student.forecast(out).given(x, 24)
    both = metrics.window_errors(forecast, true, (std, mean))
    scaled, original = both[:, :len(metrics.names())], both[:, len(metrics.names()):]
    assert torch.equal(scaled.nan_to_num(), metrics.window_errors(forecast, true).nan_to_num())
    direct = metrics.window_errors(student.forecast(out).given(x, 24).rescaled(std, mean), true * std + mean)
    assert torch.allclose(original, direct, rtol=1e-9, equal_nan=True)  # std_power's shortcuts, up to rounding
    found = dict(zip(metrics.names(), original.T))
    assert torch.allclose(found["mse"], ((forecast.point * std + mean - (true * std + mean)) ** 2).mean((1, 2)))
    for name in ("coverage_80", "mase", "msis"):
        assert torch.equal(found[name], dict(zip(metrics.names(), scaled.T))[name])
    corpus = metrics.window_errors(forecast, true, (None, None))
    assert corpus[:, len(metrics.names()):].isnan().all(), "a corpus: no single scale"
    assert list(metrics.metrics_from_windows(both)) == list(metrics.reported_names())


def test_nmae_and_ncrps_are_probts_per_window_ratios_to_the_size_of_the_target():
    """ProbTS: per window, sum |y - median| / sum |y| and the mean over levels of 2 sum pinball / sum |y|, then the
    mean over windows; a point forecast's ncrps is its nmae."""
    torch.manual_seed(2)
    true, samples = torch.randn(4, 6, 2, dtype=torch.float64) + 5, torch.randn(4, 6, 2, 100, dtype=torch.float64) + 5
    levels = tuple(i / 20 for i in range(1, 20))
    found = dict(zip(metrics.names(), metrics.window_errors(metrics.sample_forecast(samples, levels), true).T))
    s, y = samples.numpy(), true.numpy()
    size = np.abs(y).sum((1, 2))
    median = np.quantile(s, 0.5, axis=-1)
    assert found["nmae"].numpy() == pytest.approx(np.abs(y - median).sum((1, 2)) / size, rel=1e-12)
    wql = [2 * np.abs((np.quantile(s, q, axis=-1) - y) * ((y <= np.quantile(s, q, axis=-1)) - q)).sum((1, 2)) / size
           for q in levels]
    assert found["ncrps"].numpy() == pytest.approx(np.mean(wql, axis=0), rel=1e-12)
    point = dict(zip(metrics.names(), metrics.window_errors(true + 0.3, true).T))
    assert torch.allclose(point["ncrps"], point["nmae"], rtol=1e-12)


def test_a_univariate_window_knows_its_channel_through_a_subset():
    from data_provider.windows import WindowDataset, direct_offsets, sampled
    ds = WindowDataset(torch.randn(40, 3), None, 0, 40, 8, direct_offsets(8, 4), univariate=True)
    assert ds.n_starts == 29 and ds.channels(torch.tensor([0, 28, 29, 86])).tolist() == [0, 0, 1, 2]
    some = sampled(ds, 10, seed=3)
    assert torch.equal(some.channels(torch.arange(10)), some.subset // 29)
