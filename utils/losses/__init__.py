"""Training losses, each defined once. A loss is what training minimises and validation reports (early stopping
and the best checkpoint read it). Three kinds:

  point          one value per forecast point: (pred, true) -> the mean loss (MSE, MAE, Huber); one that
                 reads_input also gets the window's input and the data's season (MASE);
  quantile       one value per level of --quantiles per point, scored by the pinball loss;
  distribution   a distribution's parameters per point (Family), scored by its negative log-likelihood.

`objective(name, levels)` binds a loss to the run's quantile levels: the number of values per point a model
emits (models/base.py: n_outputs), the loss, the point forecast (median of quantiles, mean of a distribution) that
point metrics and rolled-out forecasts use, quantiles at any levels for the probabilistic metrics, and draws from
a distribution (samples, --num_samples).

Every module in this package lists its losses in `LOSSES`; add utils/losses/my_loss.py and the loss can be chosen
by name (--loss), with nothing else to edit.
"""
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from utils.metrics import Forecast, point_forecast
from utils.registry import collect

KINDS = ("point", "quantile", "distribution")
LEVEL_TOLERANCE = 1e-9  # levels computed in floating point (0.5 - 0.45) still match the grid's 0.05


class Family:
    """A distribution family over k raw outputs per point, each denormalised like a forecast: spreads are read as
    differences from the location, so they do not depend on the series' level."""
    n_params: int

    def nll(self, out: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
        """Per-point negative log-likelihood of true (..., ) under out (..., k)."""
        raise NotImplementedError

    def mean(self, out: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def quantile(self, out: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
        """(..., k) -> (..., Q): the distribution's quantiles at the levels, (Q,) for every point alike or
        (..., Q) a point's own (inverse-CDF sampling draws each point's uniforms through it)."""
        raise NotImplementedError


SCALE_FLOOR = 1e-3  # smallest scale a distribution gets (scaled data: a thousandth of a standard deviation)


def spread(raw: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
    """A positive scale from a raw output read relative to the location: softplus with a floor."""
    return torch.nn.functional.softplus(raw - loc) + SCALE_FLOOR


@dataclass(frozen=True)
class Loss:
    name: str
    value: Callable | None = None   # point: (pred, true) -> mean loss; quantile: (out, true, levels) -> mean loss
    help: str = ""
    kind: str = "point"
    family: Family | None = None    # distribution: its parameters and their negative log-likelihood
    reads_input: bool = False       # point: value(pred, true, insample, season), scaled by the window's input


class LossFileError(ValueError):
    """A file in utils/losses/ that cannot serve: the message names it and what is wrong."""


@functools.cache
def registry() -> dict:
    """name -> Loss, for every loss the package's modules declare (imported on first use)."""
    found = collect(__name__, __path__, "LOSSES", Loss, LossFileError)
    for loss in found.values():
        if loss.kind not in KINDS or (loss.kind == "distribution") != (loss.family is not None):
            raise LossFileError(f"utils/losses: loss {loss.name!r} must be of a kind in {KINDS}, with a family "
                                "exactly when it is a distribution")
        if loss.reads_input and loss.kind != "point":
            raise LossFileError(f"utils/losses: loss {loss.name!r} reads the input: only a point loss can")
    return found


def get(name: str) -> Callable:
    """The loss function of a registered point loss: (pred, true) -> mean loss."""
    return registry()[name].value


def interpolate(levels: torch.Tensor, values: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
    """Quantiles at `wanted` levels, linear between the given ones (values (..., Q), sorted along Q, at the sorted
    `levels`); NaN outside [levels[0], levels[-1]]: the tails beyond the outermost levels are unknown."""
    if wanted.shape == levels.shape and torch.equal(wanted, levels):  # the grid itself (CRPS): no arithmetic
        return values
    outside = (wanted < levels[0] - LEVEL_TOLERANCE) | (wanted > levels[-1] + LEVEL_TOLERANCE)
    if outside.all():  # the metrics' tails off the grid (the 90% and 95% intervals of the default grid)
        return values.new_full((*values.shape[:-1], len(wanted)), float("nan"))
    on_level = (wanted[:, None] - levels[None, :]).abs() <= LEVEL_TOLERANCE
    if on_level.any(1).all():  # levels of the grid (the median, the 80% interval of the default grid): a copy
        return values.index_select(-1, on_level.int().argmax(1))
    idx = torch.searchsorted(levels, wanted).clamp(1, len(levels) - 1)
    lo, hi = levels[idx - 1], levels[idx]
    weight = ((wanted - lo) / (hi - lo)).to(values.dtype)
    out = values[..., idx - 1] * (1 - weight) + values[..., idx] * weight
    return out.masked_fill(outside, float("nan")) if outside.any() else out


def _median(levels: torch.Tensor, ordered: torch.Tensor) -> torch.Tensor:
    """The quantile at 0.5 of sorted quantile outputs (interpolated where the levels lack it)."""
    return interpolate(levels, ordered, torch.tensor([0.5], dtype=torch.float64, device=ordered.device))[..., 0]


@dataclass(frozen=True)
class Objective:
    """A loss bound to the run's quantile levels (--quantiles) and the data's season (a loss that reads the input)."""
    loss: Loss
    levels: tuple
    season: int = 1

    @property
    def outputs(self) -> int:
        """Values a model emits per forecast point."""
        return {"point": 1, "quantile": len(self.levels)}.get(self.loss.kind) or self.loss.family.n_params

    @property
    def probabilistic(self) -> bool:
        return self.loss.kind != "point"

    def __call__(self, out: torch.Tensor, true: torch.Tensor, insample: torch.Tensor | None = None) -> torch.Tensor:
        """insample: the windows' input (batch, lookback, channels), on the forecast's channels (the last)."""
        if self.loss.reads_input:
            return self.loss.value(out, true, insample[:, :, -true.shape[2]:], self.season)
        if self.loss.kind == "point":
            return self.loss.value(out, true)
        if self.loss.kind == "quantile":
            return self.loss.value(out, true, self._levels(out))
        return self.loss.family.nll(out, true).mean()

    def point(self, out: torch.Tensor) -> torch.Tensor:
        """The point forecast (batch, time, channels): the forecast itself, the median of the quantiles, or the
        distribution's mean."""
        if self.loss.kind == "point":
            return out
        if self.loss.kind == "quantile":
            return _median(self._levels(out), out.sort(-1).values)
        return self.loss.family.mean(out)

    def quantiles(self, out: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
        """(batch, time, channels, len(wanted)) quantile forecasts, in float64: a point forecast is a point mass
        (every quantile is the forecast); quantile outputs are sorted (no crossing) and interpolated between
        levels (NaN beyond the outermost); a distribution's are exact."""
        return self.forecast(out).quantile(wanted.to(out.device))

    def draw(self, out: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
        """Samples of a distribution (..., k) by its inverse CDF at uniforms (..., S) in (0, 1), in float64: a
        sample is a function of its uniform, so whoever draws the uniforms decides the samples (exp/forward.py
        draws them per window, the same under any number of ranks)."""
        return self.loss.family.quantile(out.double(), uniforms)

    def forecast(self, out: torch.Tensor) -> Forecast:
        """What the metrics read of a forecast, in float64 (utils/metrics: Forecast); quantile outputs sorted once."""
        out, levels = out.double(), self._levels(out)
        if self.loss.kind == "point":
            return point_forecast(out, self.levels)
        if self.loss.kind == "distribution":
            return Forecast(self.loss.family.mean(out), lambda wanted: self.loss.family.quantile(out, wanted), levels)
        ordered = out.sort(-1).values
        return Forecast(_median(levels, ordered), lambda wanted: interpolate(levels, ordered, wanted), levels)

    def _levels(self, out: torch.Tensor) -> torch.Tensor:
        return torch.tensor(self.levels, dtype=torch.float64, device=out.device)


def objective(name: str, levels: tuple, season: int = 1) -> Objective:
    return Objective(registry()[name], tuple(levels), season)
