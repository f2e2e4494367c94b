import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, hparam, use_norm
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import per_series


class GenericBasis(nn.Module):
    """theta is the backcast and the forecast themselves: the first seq_len values, then horizon x k."""

    def __init__(self, seq_len: int, horizon: int, n_outputs: int):
        super().__init__()
        self.seq_len, self.horizon, self.n_outputs = seq_len, horizon, n_outputs
        self.theta_size = seq_len + horizon * n_outputs

    def forward(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return theta[:, :self.seq_len], theta[:, self.seq_len:].unflatten(-1, (self.horizon, self.n_outputs))


class FunctionBasis(nn.Module):
    """Backcast and forecast as combinations of fixed functions of time (rows of backcast_basis, forecast_basis,
    `size` of them): theta holds the forecast's size x k coefficients (k forecasts), then the backcast's size."""

    def forward(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        split = self.size * self.n_outputs
        forecast = torch.einsum("npk,pt->ntk", theta[:, :split].unflatten(-1, (self.size, self.n_outputs)),
                                self.forecast_basis)
        return theta[:, split:] @ self.backcast_basis, forecast


class TrendBasis(FunctionBasis):
    """Polynomials of degree `degree` in time t / length (t = 0 .. length-1, the window and the horizon each on
    its own grid, as the official TrendBasis)."""

    def __init__(self, degree: int, seq_len: int, horizon: int, n_outputs: int):
        super().__init__()
        self.size, self.n_outputs = degree + 1, n_outputs
        self.theta_size = self.size * (n_outputs + 1)
        powers = torch.arange(self.size, dtype=torch.float64)[:, None]
        grid = lambda length: (torch.arange(length, dtype=torch.float64) / length) ** powers  # noqa: E731
        # constants of the architecture, rebuilt with the model: not in its checkpoints
        self.register_buffer("backcast_basis", grid(seq_len).float(), persistent=False)
        self.register_buffer("forecast_basis", grid(horizon).float(), persistent=False)


class SeasonalityBasis(FunctionBasis):
    """Cosines and sines of the frequencies 0 and (harmonics .. harmonics * horizon / 2, step 1) / harmonics, in
    cycles per horizon (the official SeasonalityBasis); the backcast's grid runs backwards from the window's end,
    as the window is fed reversed. Coefficients: of the cosines, then of the sines."""

    def __init__(self, harmonics: int, seq_len: int, horizon: int, n_outputs: int):
        super().__init__()
        # the official np.arange(harmonics, harmonics / 2 * horizon): empty, not an error, for a horizon of 1
        count = max(math.ceil(harmonics / 2 * horizon - harmonics), 0)
        frequency = torch.cat([torch.zeros(1, dtype=torch.float64),
                               (harmonics + torch.arange(count, dtype=torch.float64)) / harmonics])
        self.size, self.n_outputs = 2 * len(frequency), n_outputs  # a cosine and a sine per frequency
        self.theta_size = self.size * (n_outputs + 1)

        def waves(steps):  # (2 * frequencies, len(steps)): cosines, then sines; computed in float64, rounded once
            phase = 2 * math.pi * frequency[:, None] * steps[None, :] / horizon
            return torch.cat([phase.cos(), phase.sin()]).float()

        self.register_buffer("backcast_basis", waves(-torch.arange(seq_len, dtype=torch.float64)), persistent=False)
        self.register_buffer("forecast_basis", waves(torch.arange(horizon, dtype=torch.float64)), persistent=False)


class Block(nn.Module):
    """`layers` fully connected ReLU layers of `layer_size` units, a linear map to the basis' theta, the basis."""

    def __init__(self, seq_len: int, layers: int, layer_size: int, basis: nn.Module):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(seq_len if i == 0 else layer_size, layer_size) for i in range(layers))
        self.theta = nn.Linear(layer_size, basis.theta_size)
        self.basis = basis

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for layer in self.layers:
            x = F.relu(layer(x))
        return self.basis(self.theta(x))


class Model(nn.Module):
    """N-BEATS: deep stacks of fully connected blocks, each projecting onto a basis a backcast, taken off its
    successors' input, and a forecast, added to the forecast (doubly residual stacking).

    Oreshkin, Carpov, Chapados, Bengio. "N-BEATS: Neural basis expansion analysis for interpretable time series
    forecasting." ICLR 2020. https://arxiv.org/abs/1905.10437 (official code: ElementAI/N-BEATS, commit 04f56c4,
    models/nbeats.py for the blocks and bases, experiments/model.py for the two architectures,
    experiments/m4/{generic,interpretable}.gin for their M4 settings)

    Every channel is forecast as a series of its own (channels folded into the batch). As the official NBeats
    forward: the window is reversed, the forecast starts at the window's last value (the naive forecast) and each
    block adds its own; a block's input is its predecessor's input minus that predecessor's backcast.
    architecture "generic": `stacks` blocks (the paper's stacks of one block) of `layers` ReLU layers of `layer_size`
    units, theta = backcast and forecast (GenericBasis); defaults: the M4 generic model (generic.gin: 30 stacks,
    4 layers, 512 units, no sharing). architecture "interpretable": a trend stack of `trend_blocks` blocks
    (`trend_layers` x `trend_layer_size`, polynomial basis of degree `degree_of_polynomial`), then a seasonality
    stack of `seasonality_blocks` blocks (`seasonality_layers` x `seasonality_layer_size`, Fourier basis of
    `harmonics`), each stack one block applied repeatedly (weights shared within a stack, as experiments/model.py
    repeats one block); defaults: interpretable.gin (3 blocks, 4 layers, 256 units, degree 2; 3 blocks, 4 layers,
    2048 units, 1 harmonic). Layers keep torch's default initialisation, as the official code. use_norm is off
    as in the paper, which feeds M4 unscaled.

    n_outputs k > 1 (multi_output): a block's theta holds k forecasts (k coefficients per basis function) and
    one backcast; the naive level is added to each of the k values.

    Deviations from the official code: no input mask (the official forward multiplies the residuals by the
    reversed mask of observed points; the framework's windows have no missing points, so it would be all ones,
    which changes nothing); the basis matrices are computed in float64 and rounded once to float32 (the official
    SeasonalityBasis computes its phases in float32: off by up to ~1e-4 where a phase reaches thousands of
    radians, long windows) and kept out of checkpoints (constants of the architecture).
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=False,  # channel-independent
                                multi_output=True)

    @dataclass
    class Config:
        architecture: str = hparam("generic", "N-BEATS architecture: generic (identity basis) or interpretable "
                                              "(a trend, then a seasonality stack)",
                                   choices=("generic", "interpretable"))
        stacks: int = hparam(30, "generic: number of stacks (of one block each)", tiny=2, low=1)
        layers: int = hparam(4, "generic: fully connected layers per block", tiny=2, low=1)
        layer_size: int = hparam(512, "generic: units per fully connected layer", tiny=16, low=1)
        trend_blocks: int = hparam(3, "interpretable: blocks of the trend stack (one block's weights)", tiny=2, low=1)
        trend_layers: int = hparam(4, "interpretable: fully connected layers per trend block", tiny=2, low=1)
        trend_layer_size: int = hparam(256, "interpretable: units per trend layer", tiny=16, low=1)
        degree_of_polynomial: int = hparam(2, "interpretable: degree of the trend polynomials", low=0)
        seasonality_blocks: int = hparam(3, "interpretable: blocks of the seasonality stack (one block's weights)",
                                         tiny=2, low=1)
        seasonality_layers: int = hparam(4, "interpretable: fully connected layers per seasonality block", tiny=2,
                                         low=1)
        seasonality_layer_size: int = hparam(2048, "interpretable: units per seasonality layer", tiny=16, low=1)
        harmonics: int = hparam(1, "interpretable: frequency resolution of the seasonality basis (frequencies "
                                   "in steps of 1/harmonics cycles per horizon)", low=1)
        use_norm: bool = use_norm()

    def __init__(self, configs):
        super().__init__()
        L, H, self.n_outputs = configs.seq_len, configs.output_token_len, configs.n_outputs
        self.use_norm = configs.use_norm
        if configs.architecture == "generic":
            self.stacks = nn.ModuleList(Block(L, configs.layers, configs.layer_size, GenericBasis(L, H, self.n_outputs))
                                        for _ in range(configs.stacks))
            self.repeats = (1,) * configs.stacks
        else:
            trend = TrendBasis(configs.degree_of_polynomial, L, H, self.n_outputs)
            seasonality = SeasonalityBasis(configs.harmonics, L, H, self.n_outputs)
            self.stacks = nn.ModuleList([Block(L, configs.trend_layers, configs.trend_layer_size, trend),
                                         Block(L, configs.seasonality_layers, configs.seasonality_layer_size,
                                               seasonality)])
            self.repeats = (configs.trend_blocks, configs.seasonality_blocks)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.use_norm:
            x, stats = normalize(x)
        out = per_series(self.forecast, x, self.n_outputs)
        return denormalize(out, stats) if self.use_norm else out

    def forecast(self, series: torch.Tensor, decompose: bool = False):
        """The forecast (N, horizon, k) of series (N, seq_len); decompose: instead the list of its terms, each
        (N, horizon, k): the naive level (the window's last value, (N, 1, 1)), then each stack's forecast
        (interpretable: the trend, then the seasonality)."""
        residuals, forecast = series.flip(-1), series[:, -1:, None]
        terms = [forecast]
        for block, repeats in zip(self.stacks, self.repeats):
            stack = 0
            for _ in range(repeats):
                backcast, block_forecast = block(residuals)
                residuals = residuals - backcast
                forecast = forecast + block_forecast  # block by block, in the official order of additions
                stack = stack + block_forecast
            terms.append(stack)
        return terms if decompose else forecast
