"""Metrics and reductions: per-window errors summed exactly, global means, slow ranks."""
import math

import numpy as np
import pytest
import torch

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
    assert torch.equal(parts, errors)  # a window's errors do not depend on the batch it was scored in


def test_global_mean_single_process_is_sum_over_count():
    assert global_mean(torch.tensor(6.0), torch.tensor(4)).item() == 1.5


def test_slow_ranks_are_those_beyond_one_and_a_half_medians():
    assert slow_ranks([1.0, 1.1, 0.9, 2.0]) == [3]
    assert slow_ranks([1.0, 1.4]) == [] and slow_ranks([1.0]) == []
