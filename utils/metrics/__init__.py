"""Forecast metrics, each defined once: a value per forecast point, averaged over every point of every test
window, then finalised (RMSE: the square root of the mean). The framework averages the points' values in
float64 per test window; the ranks' windows are put together in one all_reduce, so a sharded evaluation sums
nothing differently from one process (the forecasts themselves aside), and each window's errors are kept for
comparing runs window by window.

Every module in this package lists its metrics in `METRICS`; add utils/metrics/my_metric.py and every test
reports it (log line, metrics.json, results.csv), with nothing else to edit.
"""
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from utils.registry import collect

FIRST = ("mse", "mae", "rmse", "mape", "mspe")  # the papers' order; other metrics follow by name


@dataclass(frozen=True)
class Metric:
    name: str
    per_point: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (pred, true), float64 -> same shape
    finalise: Callable[[float], float] = lambda mean: mean           # of the mean over all points
    help: str = ""


class MetricFileError(ValueError):
    """A file in utils/metrics/ that cannot serve: the message names it and what is wrong."""


@functools.cache
def registry() -> tuple:
    """Every metric the package's modules declare, in report order (imported on first use)."""
    found = collect(__name__, __path__, "METRICS", Metric, MetricFileError)
    order = {name: i for i, name in enumerate(FIRST)}
    return tuple(sorted(found.values(), key=lambda m: (order.get(m.name, len(FIRST)), m.name)))


def names() -> tuple:
    return tuple(m.name for m in registry())


def window_errors(pred: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    """(windows, metrics) float64: each window's mean of each metric's per-point values over its points."""
    pred, true = pred.double(), true.double()
    return torch.stack([m.per_point(pred, true).flatten(1).mean(1) for m in registry()], dim=1)


def metrics_from_windows(errors: torch.Tensor) -> dict:
    """The test metrics from every window's errors: each finalised mean over the windows. Every window of a
    test has the same number of points, so this is the mean over all points."""
    return {m.name: m.finalise(mean) for m, mean in zip(registry(), errors.mean(0).tolist(), strict=True)}


def log_line(metrics: dict) -> str:
    return " | ".join(f"{name} {metrics[name]:.6f}" for name in names())
