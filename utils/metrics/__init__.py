"""Forecast metrics, each defined once: a value per forecast point, averaged over every point of every test
window, then finalised (RMSE: the square root of the mean). The framework sums the points' values in float64
on each rank and reduces the sums in one all_reduce, so sharded evaluation is exactly one process's.

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


def zero_sums(device: torch.device) -> torch.Tensor:
    """What error_sums returns for no windows: a rank without test batches still joins the all_reduce."""
    return torch.zeros(len(registry()) + 1, dtype=torch.float64, device=device)


def error_sums(pred: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    """[sum of each metric's per-point values..., number of points] in float64."""
    pred, true = pred.double(), true.double()
    sums = [m.per_point(pred, true).sum() for m in registry()]
    return torch.stack([*sums, torch.tensor(float(pred.numel()), dtype=torch.float64, device=pred.device)])


def metrics_from_sums(sums: torch.Tensor) -> dict:
    *totals, n = sums.tolist()
    return {m.name: m.finalise(total / n) for m, total in zip(registry(), totals, strict=True)}


def log_line(metrics: dict) -> str:
    return " | ".join(f"{name} {metrics[name]:.6f}" for name in names())
