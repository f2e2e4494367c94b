import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, hparam, revin
from models.layers.normalization import RevIN
from models.layers.outputs import per_series


def ema(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """Exponential moving average along the last axis of x (..., L): s_0 = x_0, s_t = alpha x_t + (1 - alpha) s_(t-1).

    All L steps at once as a cumulative sum: s_t = sum_i w_i x_i / (1 - alpha)^(L-1-t), with
    w_i = (1 - alpha)^(L-1-i) (times alpha for i > 0), in float64 and rounded once, as the official code. Where
    (1 - alpha)^(L-1) would leave float64's range (the official code then divides 0 by 0), the window is taken in
    spans that do not, each continuing from the last level of the one before as its first point."""
    L = x.shape[-1]
    span = L if alpha == 0 else int(-690 / math.log1p(-alpha)) + 1  # (1 - alpha)^(span - 1) >= e^-690 ~ 1e-300
    if L > span:
        head = ema(x[..., :span], alpha)
        return torch.cat([head, ema(torch.cat([head[..., -1:], x[..., span:]], -1), alpha)[..., 1:]], -1)
    decay = (1 - alpha) ** torch.arange(L - 1, -1, -1, dtype=torch.float64, device=x.device)
    weights = torch.cat([decay[:1], decay[1:] * alpha])
    return ((x * weights).cumsum(-1) / decay).to(x.dtype)


def holt(x: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    """Double exponential smoothing (Holt's linear trend) along the last axis of x (..., L): the level s_t and slope
    b_t, s_0 = x_0, b_0 = x_1 - x_0, s_t = alpha x_t + (1 - alpha)(s_(t-1) + b_(t-1)),
    b_t = beta (s_t - s_(t-1)) + (1 - beta) b_(t-1); returns the levels."""
    level, slope = x[..., 0], x[..., 1] - x[..., 0]
    levels = [level]
    for t in range(1, x.shape[-1]):
        new = alpha * x[..., t] + (1 - alpha) * (level + slope)
        slope = beta * (new - level) + (1 - beta) * slope
        level = new
        levels.append(level)
    return torch.stack(levels, dim=-1)


class Model(nn.Module):
    """xPatch: exponential seasonal-trend decomposition, a CNN stream over patches of the seasonal part and an MLP
    stream over the trend, both channel-independent.

    Stitsyuk, Choi. "xPatch: Dual-Stream Time Series Forecasting with Exponential Seasonal-Trend Decomposition."
    AAAI 2025. https://arxiv.org/abs/2412.17323 (official code: github.com/stitsyuk/xPatch, models/xPatch.py and
    layers/)

    The window, RevIN-normalised with a learnable per-channel affine (revin), is split into a trend, its
    exponential moving average with smoothing factor alpha (ma_type ema; dema: Holt's double exponential
    smoothing with beta; reg: no decomposition, both streams read the window), and the seasonal remainder.
    Seasonal stream, per channel: the series padded at the end by `stride` repeats of its last point and cut into
    patches of patch_len every stride points; each patch embedded to patch_len^2 (linear, GELU, BatchNorm over the
    patches); a depthwise convolution (one filter per patch, kernel and stride patch_len, GELU, BatchNorm) plus a
    linear residual back to patch_len; a pointwise convolution mixing the patches (GELU, BatchNorm); flattened and
    mapped to the horizon by an MLP (2 x horizon hidden units, GELU). Trend stream: linear to 4 x horizon, average
    pooling by 2, LayerNorm, linear to the horizon, pooling by 2, LayerNorm, linear to the horizon. A linear layer
    maps the two forecasts, concatenated, to the output.

    The official training (arctangent-weighted MAE, its `sigmoid` learning-rate schedule, AdamW) is the
    framework's to choose, not the model's. Deviations from the official code: the end padding is always on (the
    official --padding_patch None, which no official script sets, is not offered); its EMA and DEMA move tensors to
    'cuda' and run nowhere else, and its DEMA needs alpha and beta as tensors (the flags give floats), here they
    run on any device from the floats; where the official EMA's powers of (1 - alpha) leave float64's range (alpha 0.9
    beyond 300 points) and it returns NaN, the moving average here is taken in spans (`ema`).
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=False,  # channel-independent
                                multi_output=True)

    @dataclass
    class Config:
        patch_len: int = hparam(16, "points per patch", tiny=8, low=1)
        stride: int = hparam(8, "distance between patch starts", tiny=4, low=1)
        ma_type: str = hparam("ema", "trend of the decomposition: exponential moving average (alpha), double "
                                     "exponential smoothing (dema: alpha, beta), or none (reg)",
                              choices=("ema", "dema", "reg"))
        alpha: float = hparam(0.3, "smoothing factor of the exponential moving average (weight of the newest point)",
                              low=0.0, high=1.0)
        beta: float = hparam(0.3, "dema: smoothing factor of the trend's slope", low=0.0, high=1.0)
        revin: bool = revin(True)

    def __init__(self, configs):
        super().__init__()
        L, H, P, S, k = (configs.seq_len, configs.output_token_len, configs.patch_len, configs.stride,
                         configs.n_outputs)
        if P > L:
            raise ValueError(f"patch_len {P} is longer than seq_len {L}")
        if H < 2:
            raise ValueError(f"xPatch's trend stream halves the horizon twice; output_token_len {H} is too short")
        self.patch_len, self.stride, self.n_outputs = P, S, k
        self.ma_type, self.alpha, self.beta = configs.ma_type, configs.alpha, configs.beta
        self.revin = RevIN(configs.enc_in, inverse_eps=1e-10) if configs.revin else None  # the official eps^2
        N = (L - P) // S + 2  # patches, +1 for the end padding
        self.embed = nn.Linear(P, P * P)
        self.embed_norm = nn.BatchNorm1d(N)
        self.depthwise = nn.Conv1d(N, N, P, stride=P, groups=N)
        self.depthwise_norm = nn.BatchNorm1d(N)
        self.residual = nn.Linear(P * P, P)
        self.pointwise = nn.Conv1d(N, N, 1)
        self.pointwise_norm = nn.BatchNorm1d(N)
        self.seasonal_head = nn.Sequential(nn.Flatten(start_dim=-2), nn.Linear(N * P, 2 * H), nn.GELU(),
                                           nn.Linear(2 * H, H))
        self.trend = nn.Sequential(nn.Linear(L, 4 * H), nn.AvgPool1d(2), nn.LayerNorm(2 * H),
                                   nn.Linear(2 * H, H), nn.AvgPool1d(2), nn.LayerNorm(H // 2),
                                   nn.Linear(H // 2, H))
        self.mix = nn.Linear(2 * H, H * k)

    def seasonal_stream(self, s: torch.Tensor) -> torch.Tensor:  # (series, L) -> (series, H)
        patches = F.pad(s, (0, self.stride), mode="replicate").unfold(-1, self.patch_len, self.stride)
        h = self.embed_norm(F.gelu(self.embed(patches)))  # (series, N, P^2)
        h = self.depthwise_norm(F.gelu(self.depthwise(h))) + self.residual(h)  # (series, N, P)
        h = self.pointwise_norm(F.gelu(self.pointwise(h)))
        return self.seasonal_head(h)

    def forecast(self, series: torch.Tensor) -> torch.Tensor:  # (series, L) -> (series, H, k)
        if self.ma_type == "reg":
            seasonal = trend = series
        else:
            trend = ema(series, self.alpha) if self.ma_type == "ema" else holt(series, self.alpha, self.beta)
            seasonal = series - trend
        out = self.mix(torch.cat([self.seasonal_stream(seasonal), self.trend(trend)], dim=-1))
        return out.view(len(series), -1, self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.revin is not None:
            x, stats = self.revin.normalize(x)
        out = per_series(self.forecast, x, self.n_outputs)
        return self.revin.denormalize(out, stats) if self.revin is not None else out
