"""Forecast metrics, each defined once: a value per forecast point, averaged over every point of every test
window, then finalised (RMSE: the square root of the mean). The framework averages the points' values in
float64 per test window; the ranks' windows are put together in one all_reduce, so a sharded evaluation sums
nothing differently from one process (the forecasts themselves aside), and each window's errors are kept for
comparing runs window by window.

A point metric reads the point forecast; one declared probabilistic=True reads the whole Forecast: its quantiles
at any levels (a point forecast is a point mass: every quantile is the forecast) and the windows' inputs (MASE
scales by them). Those are reported after the point metrics.

Every module in this package lists its metrics in `METRICS`; add utils/metrics/my_metric.py and every test
reports it (log line, metrics.json, results.csv), with nothing else to edit.
"""
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from utils.registry import collect

FIRST = ("mse", "mae", "rmse", "mape", "mspe")  # the papers' order; other metrics follow by name
GRID = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)  # the quantile levels of GIFT-Eval and fev: --quantiles' default


@dataclass(frozen=True)
class Metric:
    name: str
    per_point: Callable  # (pred, true) -> same shape, float64; probabilistic: (Forecast, true)
    finalise: Callable[[float], float] = lambda mean: mean           # of the mean over all points
    help: str = ""
    probabilistic: bool = False


class Forecast:
    """What a probabilistic metric reads of a batch's forecast, in float64: the point forecast, quantiles at any
    levels (batch, time, channels, levels; each set of levels computed once per batch), the run's quantile grid
    (--quantiles), whether it is a point mass (a point forecast: every quantile is the point), and the windows'
    inputs (batch, lookback, channels of the forecast; None: not given) with the series' season, which scaled
    metrics (MASE, MSIS) divide by."""

    def __init__(self, point: torch.Tensor, quantiles: Callable[[torch.Tensor], torch.Tensor], grid: torch.Tensor,
                 point_mass: bool = False):
        self.point, self.grid, self.point_mass = point, grid, point_mass
        self._quantiles, self._known = quantiles, {}
        self.insample, self.season = None, 1

    def given(self, insample: torch.Tensor, season: int) -> "Forecast":
        """The forecast with the windows' inputs it was made from."""
        self.insample, self.season = insample.double(), season
        return self

    def quantile(self, levels: torch.Tensor) -> torch.Tensor:
        key = tuple(levels.tolist())
        if key not in self._known:
            self._known[key] = self._quantiles(levels)
        return self._known[key]


class MetricFileError(ValueError):
    """A file in utils/metrics/ that cannot serve: the message names it and what is wrong."""


@functools.cache
def registry() -> tuple:
    """Every metric the package's modules declare, in report order (imported on first use)."""
    found = collect(__name__, __path__, "METRICS", Metric, MetricFileError)
    order = {name: i for i, name in enumerate(FIRST)}
    return tuple(sorted(found.values(),  # the point metrics, then CRPS and the other probabilistic ones
                        key=lambda m: (order.get(m.name, len(FIRST)), m.probabilistic, m.name != "crps", m.name)))


def names() -> tuple:
    return tuple(m.name for m in registry())


def point_forecast(pred: torch.Tensor, grid: tuple = GRID) -> Forecast:
    """A point forecast as a Forecast: a point mass, every quantile the forecast."""
    pred = pred.double()
    return Forecast(pred, lambda levels: pred.unsqueeze(-1).expand(*pred.shape, len(levels)),
                    torch.tensor(grid, dtype=torch.float64), point_mass=True)


def window_errors(forecast: Forecast | torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    """(windows, metrics) float64: each window's mean of each metric's per-point values over its points."""
    if isinstance(forecast, torch.Tensor):
        forecast = point_forecast(forecast)
    true = true.double()
    return torch.stack([(m.per_point(forecast, true) if m.probabilistic else m.per_point(forecast.point, true))
                        .flatten(1).mean(1) for m in registry()], dim=1)


def calibration(forecast: Forecast, true: torch.Tensor) -> torch.Tensor:
    """(windows, grid levels) float64: each window's share of points at or below its forecast's quantile at each
    level of the grid (--quantiles). Over many windows a calibrated forecast's share at level q is q: averaged over
    windows, the quantile coverage curve (a PIT summary)."""
    below = (true.double().unsqueeze(-1) <= forecast.quantile(forecast.grid.to(true.device))).double()
    return below.flatten(1, -2).mean(1)


def calibration_summary(shares: torch.Tensor, grid: tuple) -> dict:
    """The quantile coverage curve from every window's shares (calibration), and its mean absolute gap to the
    levels."""
    curve = shares.mean(0).tolist()
    return {"calibration": {f"{q:g}": share for q, share in zip(grid, curve, strict=True)},
            "calibration_error": sum(abs(share - q) for q, share in zip(grid, curve)) / len(grid)}


def metrics_from_windows(errors: torch.Tensor) -> dict:
    """The test metrics from every window's errors: each finalised mean over the windows. Every window of a
    test has the same number of points, so this is the mean over all points."""
    return {m.name: m.finalise(mean) for m, mean in zip(registry(), errors.mean(0).tolist(), strict=True)}


def log_line(metrics: dict) -> str:
    return " | ".join(f"{name} {metrics[name]:.6f}" for name in names())
