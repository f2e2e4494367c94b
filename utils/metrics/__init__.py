"""Forecast metrics, each defined once: a value per forecast point, averaged over every point of every test
window, then finalised (RMSE: the square root of the mean). The framework averages the points' values in
float64 per test window; the ranks' windows are put together in one all_reduce, so a sharded evaluation sums
nothing differently from one process (the forecasts themselves aside), and each window's errors are kept for
comparing runs window by window.

A point metric reads the point forecast; one declared probabilistic=True reads the whole Forecast: its quantiles
at any levels (a point forecast is a point mass: every quantile is the forecast), its samples where it has them
(--num_samples) and the windows' inputs (MASE scales by them). Those are reported after the point metrics.

Every metric is also reported on the original scale, the data's standardisation inverted (the training split's
mean and std of each channel), named <metric>_original: apart from the scaled values that the paper tables use.

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
ORIGINAL = "_original"  # the suffix of a metric on the original scale


@dataclass(frozen=True)
class Metric:
    name: str
    per_point: Callable  # (pred, true) -> same shape, float64; probabilistic: (Forecast, true)
    finalise: Callable[[float], float] = lambda mean: mean           # of the mean over all points
    help: str = ""
    probabilistic: bool = False
    # how a point's value changes when the data are mapped to std * x + mean: multiplied by std ** std_power (0: the
    # same, as coverage, MASE and MSIS; 1: errors; 2: squared errors), or None: computed anew on the mapped data
    std_power: int | None = None


class Forecast:
    """What a probabilistic metric reads of a batch's forecast, in float64: the point forecast, quantiles at any
    levels (batch, time, channels, levels; each set of levels computed once per batch), the run's quantile grid
    (--quantiles), whether it is a point mass (a point forecast: every quantile is the point), its samples
    (batch, time, channels, samples), sorted along the samples (None: a forecast that is not made of samples), and
    the windows' inputs (batch, lookback, channels of the forecast; None: not given) with the series' season,
    which scaled metrics (MASE, MSIS) divide by, or the data's own scale of each window (None: from the inputs)."""

    def __init__(self, point: torch.Tensor, quantiles: Callable[[torch.Tensor], torch.Tensor], grid: torch.Tensor,
                 point_mass: bool = False, samples: torch.Tensor | None = None):
        self.point, self.grid, self.point_mass, self.samples = point, grid, point_mass, samples
        self._quantiles, self._known, self._memo = quantiles, {}, {}
        self.insample, self.season, self.scale = None, 1, None

    def given(self, insample: torch.Tensor, season: int, scale: torch.Tensor | None = None) -> "Forecast":
        """The forecast with the windows' inputs it was made from; scale (windows, 1, 1): the scale of the scaled
        metrics where the data give one (M4: each series' whole history), else they take it from the inputs."""
        self.insample, self.season, self.scale = insample.double(), season, scale
        return self

    def quantile(self, levels: torch.Tensor) -> torch.Tensor:
        key = tuple(levels.tolist())
        if key not in self._known:
            self._known[key] = self._quantiles(levels.to(self.point.device))
        return self._known[key]

    def memo(self, name: str, true: torch.Tensor, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        """A per-point error that several metrics read (CRPS: crps, ncrps), computed once for these targets. It
        must scale with std as an error does: the forecast mapped to the original scale takes it over."""
        known = self._memo.get(name)
        if known is None or known[0] is not true:
            known = self._memo[name] = (true, compute())
        return known[1]

    def rescaled(self, std: torch.Tensor, mean: torch.Tensor) -> "Forecast":
        """The forecast of the series std * x + mean (std > 0, mean: broadcastable to the points (batch, time,
        channels)): every quantile, sample and input mapped alike, the quantiles read through this forecast's."""
        def affine(t, per_level=False):
            return None if t is None else t * (std.unsqueeze(-1) if per_level else std) + (
                mean.unsqueeze(-1) if per_level else mean)
        out = Forecast(affine(self.point), lambda levels: affine(self.quantile(levels), True), self.grid,
                       self.point_mass, affine(self.samples, True))
        out.insample, out.season = affine(self.insample), self.season
        out.scale = None if self.scale is None else self.scale * std
        return out


class MetricFileError(ValueError):
    """A file in utils/metrics/ that cannot serve: the message names it and what is wrong."""


@functools.cache
def registry() -> tuple:
    """Every metric the package's modules declare, in report order (imported on first use)."""
    found = collect(__name__, __path__, "METRICS", Metric, MetricFileError)
    order = {name: i for i, name in enumerate(FIRST)}
    return tuple(sorted(found.values(),  # the point metrics, then the CRPSs and the other probabilistic ones
                        key=lambda m: (order.get(m.name, len(FIRST)), m.probabilistic, not m.name.startswith("crps"),
                                       m.name)))


def names() -> tuple:
    return tuple(m.name for m in registry())


def reported_names() -> tuple:
    """Every metric on the scaled data, then every one on the original scale."""
    return names() + tuple(name + ORIGINAL for name in names())


def point_forecast(pred: torch.Tensor, grid: tuple = GRID) -> Forecast:
    """A point forecast as a Forecast: a point mass, every quantile the forecast."""
    pred = pred.double()
    return Forecast(pred, lambda levels: pred.unsqueeze(-1).expand(*pred.shape, len(levels)),
                    torch.tensor(grid, dtype=torch.float64), point_mass=True)


def sample_forecast(samples: torch.Tensor, grid: tuple) -> Forecast:
    """A forecast made of samples (batch, time, channels, S): the point is their mean, a quantile the empirical
    one, linear between order statistics (numpy's default, as GluonTS's SampleForecast)."""
    ordered = samples.double().sort(-1).values
    last = ordered.shape[-1] - 1

    def quantiles(levels: torch.Tensor) -> torch.Tensor:
        position = levels.to(ordered.device, torch.float64) * last
        below = position.floor().long().clamp(max=last)
        weight = position - below
        return ordered[..., below] * (1 - weight) + ordered[..., (below + 1).clamp(max=last)] * weight

    return Forecast(ordered.mean(-1), quantiles, torch.tensor(grid, dtype=torch.float64), samples=ordered)


def window_errors(forecast: Forecast | torch.Tensor, true: torch.Tensor, original: tuple | None = None) -> torch.Tensor:
    """(windows, metrics) float64: each window's mean of each metric's per-point values over its points. original:
    (std, mean) of the data's standardisation, broadcastable to the points: (windows, 2 x metrics), the metrics on
    the original scale, std * x + mean, after them ((None, None): no single scale, as a corpus's: NaN). A metric
    with a std_power scales its points' values; the others are computed anew on the mapped forecast and targets."""
    if isinstance(forecast, torch.Tensor):
        forecast = point_forecast(forecast)
    true = true.double()
    values = [_per_point(m, forecast, true) for m in registry()]
    columns = [v.flatten(1).mean(1) for v in values]
    if original is None:
        return torch.stack(columns, dim=1)
    std, mean = original
    if std is None:
        unknown = torch.full((len(true), len(columns)), float("nan"), dtype=torch.float64, device=true.device)
        return torch.cat([torch.stack(columns, dim=1), unknown], dim=1)
    mapped = []  # the forecast and targets on the original scale, made when a metric needs them
    for m, v, column in zip(registry(), values, list(columns)):
        if m.std_power == 0:
            columns.append(column)
        elif m.std_power is not None:
            columns.append((v * std ** m.std_power).flatten(1).mean(1))
        else:
            if not mapped:
                mapped = [forecast.rescaled(std, mean), true * std + mean]
                mapped[0]._memo = {name: (mapped[1], error * std) for name, (_, error) in forecast._memo.items()}
            columns.append(_per_point(m, *mapped).flatten(1).mean(1))
    return torch.stack(columns, dim=1)


def _per_point(metric: Metric, forecast: Forecast, true: torch.Tensor) -> torch.Tensor:
    return metric.per_point(forecast, true) if metric.probabilistic else metric.per_point(forecast.point, true)


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
    """The test metrics from every window's errors (window_errors' columns, on one scale or both):
    each finalised mean over the windows. Every window of a test has the same number of points, so this is the
    mean over all points."""
    finalisers = [m.finalise for m in registry()] * (errors.shape[1] // len(registry()))
    return {name: finalise(mean) for name, finalise, mean
            in zip(reported_names(), finalisers, errors.mean(0).tolist(), strict=False)}


def log_line(metrics: dict, suffix: str = "") -> str:
    return " | ".join(f"{name} {metrics[name + suffix]:.6f}" for name in names())
