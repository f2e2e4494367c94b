from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, activation, dropout, hparam, use_norm
from models.layers.dropout import Dropout
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import per_series


def int_list(name: str, text: str) -> list[int]:
    """A flag's comma-separated positive integers."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{name} must be comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{name} must be positive integers, got {text!r}")
    return values


def interpolate(knots: torch.Tensor, horizon: int, mode: str) -> torch.Tensor:
    """(N, k, knots) -> (N, k, horizon). cubic: neuralforecast's bicubic upsampling of the knots as a (1, knots)
    image, of which it keeps the first row; an image of one row upsampled to one row is the same row (the
    vertical cubic weights at offset 0 are 0, 1, 0, 0), computed without the (horizon, horizon) image."""
    if mode == "cubic":
        return F.interpolate(knots.unsqueeze(2), size=(1, horizon), mode="bicubic").squeeze(2)
    return F.interpolate(knots, size=horizon, mode=mode)


class Block(nn.Module):
    """Pooling of the input (kernel = stride = pool_kernel, the last window partial), an MLP, theta: a backcast
    of seq_len points and knots, k x max(horizon // freq_downsample, 1), interpolated to the horizon."""

    def __init__(self, seq_len: int, horizon: int, widths: list[int], pool_kernel: int, freq_downsample: int,
                 pooling: str, interpolation: str, dropout: float, activation: str, n_outputs: int,
                 first_activation: bool = False):
        super().__init__()
        self.seq_len, self.horizon, self.interpolation, self.n_outputs = seq_len, horizon, interpolation, n_outputs
        pool = nn.MaxPool1d if pooling == "max" else nn.AvgPool1d
        self.pooling = pool(kernel_size=pool_kernel, stride=pool_kernel, ceil_mode=True)
        act = nn.ReLU() if activation == "relu" else nn.GELU()
        def activated() -> list:
            return [act] + ([Dropout(dropout)] if dropout > 0 else [])

        # neuralforecast's MLP: a first linear layer without activation (the paper's code activates it too), then
        # linear + activation (+ dropout)
        layers = [nn.Linear(-(-seq_len // pool_kernel), widths[0]), *(activated() if first_activation else [])]
        for width_in, width_out in zip(widths, widths[1:]):
            layers += [nn.Linear(width_in, width_out), *activated()]
        self.n_knots = max(horizon // freq_downsample, 1)
        layers.append(nn.Linear(widths[-1], seq_len + n_outputs * self.n_knots))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        theta = self.layers(self.pooling(x.unsqueeze(1)).squeeze(1))
        knots = theta[:, self.seq_len:].unflatten(-1, (self.n_outputs, self.n_knots))
        return theta[:, :self.seq_len], interpolate(knots, self.horizon, self.interpolation).transpose(1, 2)


class Model(nn.Module):
    """N-HiTS: N-BEATS' doubly residual stacks of MLP blocks, each block reading its input max-pooled at its
    stack's rate and forecasting a few knots that are interpolated to the horizon.

    Challu, Olivares, Oreshkin, Garza, Mergenthaler-Canseco, Dubrawski. "NHITS: Neural Hierarchical Interpolation
    for Time Series Forecasting." AAAI 2023. https://arxiv.org/abs/2201.12886 (official code: Nixtla's
    neuralforecast 3.3.0, neuralforecast/models/nhits.py; the paper's experiments: cchallu/n-hits, commit
    d882ee6, nhits_multivariate.py)

    Every channel is forecast as a series of its own (channels folded into the batch). As neuralforecast's
    NHITS.forward: the window is reversed, the forecast starts at the window's last value (its naive level;
    neuralforecast has no switch for it) and each block adds its own; a block's input is its predecessor's input
    minus that predecessor's backcast. Stack i has n_blocks[i] blocks (identity basis, no shared weights), pooling
    kernel n_pool_kernel_size[i] and max(horizon // n_freq_downsample[i], 1) knots (neuralforecast's floor, and
    the paper code's). A block's MLP is neuralforecast's: Linear(pooled window, w0) without activation, then
    Linear(w_i, w_i+1) + activation (+ dropout) for each next width of mlp_units, then the linear map to theta;
    neuralforecast's mlp_units [[w0, w1], [w1, w2], ...] is written w0,w1,w2,... here. Defaults: neuralforecast's
    NHITS defaults (3 identity stacks, n_blocks [1, 1, 1], mlp_units 3 x [512, 512], n_pool_kernel_size
    [2, 2, 1], n_freq_downsample [4, 2, 1], MaxPool1d, linear interpolation, dropout 0, ReLU); layers keep torch's
    default initialisation, as neuralforecast's. use_norm is off: neuralforecast's default scaler_type is identity.

    The paper's long-horizon runs (cchallu/n-hits nhits_multivariate.py; datasets ETTm2, ECL, Exchange, traffic,
    weather, ILI: no ETTh1) take a window of 5 x horizon (ILI: horizons 24, 36, 48, 60; the others 96, 192,
    336, 720), 3 stacks of 1 block, MLPs of 2 layers of 512 units (with an activation after each: the paper code's
    block, --mlp_units 512,512 --first_activation here; scripts/long_term_forecast/nhits_ILI.sh), and choose
    by a 10-trial hyperopt search on validation MAE, per dataset and
    horizon, n_pool_kernel_size among [1,1,1], [2,2,2], [4,4,4], [8,8,8], [8,4,1], [16,8,1] and
    n_freq_downsample among [168,24,1], [24,12,1], [180,60,1], [60,8,1], [40,20,1]; the values chosen are not
    published there. Training: MAE, Adam at 1e-3 halved 3 times over 1000 steps, batches of 256 windows, early
    stopping (patience 10 checks of every 50 steps).

    n_outputs k > 1 (multi_output): k sets of knots per block (neuralforecast's out_features: knots grouped
    by output), each interpolated to the horizon; the naive level is added to each of the k values.

    Deviations from neuralforecast: no input mask (neuralforecast multiplies the residuals by the reversed mask
    of observed points; the framework's windows have no missing points, so it would be all ones, which changes
    nothing); no exogenous inputs; activations relu and gelu (neuralforecast: ReLU, Softplus, Tanh, SELU,
    LeakyReLU, PReLU, Sigmoid); cubic interpolation also with k > 1 (each output's knots on their own), and
    without neuralforecast's (horizon, horizon) intermediate image.
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=False,  # channel-independent
                                multi_output=True)

    @dataclass
    class Config:
        n_blocks: str = hparam("1,1,1", "comma-separated blocks per stack (one entry per stack)", tiny="1,1")
        mlp_units: str = hparam("512,512,512,512", "comma-separated widths of a block's hidden layers "
                                                   "(neuralforecast's mlp_units [[a, b], [b, c]] is a,b,c)",
                                tiny="16,16")
        n_pool_kernel_size: str = hparam("2,2,1", "comma-separated input pooling kernel per stack", tiny="2,1")
        n_freq_downsample: str = hparam("4,2,1", "comma-separated downsampling of the forecast per stack: a "
                                                 "block forecasts max(horizon // it, 1) knots", tiny="4,1")
        pooling_mode: str = hparam("max", "input pooling per block: max (MaxPool1d) or average (AvgPool1d)",
                                   choices=("max", "average"))
        interpolation_mode: str = hparam("linear", "interpolation of the knots to the horizon",
                                         choices=("linear", "nearest", "cubic"))
        first_activation: bool = hparam(False, "an activation after a block's first linear layer too, as the N-HiTS "
                                               "paper's code (cchallu/n-hits) has; neuralforecast's has none")
        dropout: float = dropout(0.0)
        activation: str = activation("relu")
        use_norm: bool = use_norm()

    def __init__(self, configs):
        super().__init__()
        n_blocks = int_list("n_blocks", configs.n_blocks)
        kernels = int_list("n_pool_kernel_size", configs.n_pool_kernel_size)
        downsample = int_list("n_freq_downsample", configs.n_freq_downsample)
        widths = int_list("mlp_units", configs.mlp_units)
        if not len(n_blocks) == len(kernels) == len(downsample):
            raise ValueError("n_blocks, n_pool_kernel_size and n_freq_downsample need one entry per stack, got "
                             f"{configs.n_blocks!r}, {configs.n_pool_kernel_size!r}, {configs.n_freq_downsample!r}")
        if len(widths) < 2:
            raise ValueError(f"mlp_units needs at least two widths (one hidden layer pair), got {configs.mlp_units!r}")
        self.n_outputs, self.use_norm = configs.n_outputs, configs.use_norm
        self.blocks = nn.ModuleList(
            Block(configs.seq_len, configs.output_token_len, widths, kernel, rate, configs.pooling_mode,
                  configs.interpolation_mode, configs.dropout, configs.activation, self.n_outputs,
                  configs.first_activation)
            for blocks, kernel, rate in zip(n_blocks, kernels, downsample) for _ in range(blocks))

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.use_norm:
            x, stats = normalize(x)
        out = per_series(self.forecast, x, self.n_outputs)
        return denormalize(out, stats) if self.use_norm else out

    def forecast(self, series: torch.Tensor) -> torch.Tensor:
        """(N, seq_len) -> (N, horizon, k)"""
        residuals, forecast = series.flip(-1), series[:, -1:, None]
        for block in self.blocks:
            backcast, block_forecast = block(residuals)
            residuals = residuals - backcast
            forecast = forecast + block_forecast
        return forecast
