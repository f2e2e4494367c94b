from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, d_model, dropout, hparam
from models.layers.dropout import Dropout
from models.layers.embed import DataEmbedding
from models.layers.outputs import split_points
from models.layers.seasonal_trend import TimeDecomposition

MIC_DROPOUT = 0.05  # inside the MIC layers, whatever --dropout (which the embedding alone reads), as both codes


def int_list(name: str, text: str) -> list[int]:
    """A flag's comma-separated positive integers."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{name} must be comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{name} must be positive integers, got {text!r}")
    return values


def decomposition_kernel(conv_kernel: int) -> int:
    """The moving average of a scale: its convolution kernel, made odd (k + 1 for an even k), as both codes."""
    return conv_kernel + 1 - conv_kernel % 2


def isometric_kernel(length: int, conv_kernel: int) -> int:
    """The isometric convolution's kernel: the length of the downsampled sequence (stride k, padding k // 2),
    (length + k) // k for an even k and (length + k - 1) // k for an odd one, as both codes compute it."""
    return (length + conv_kernel - conv_kernel % 2) // conv_kernel


class MultiDecomposition(nn.Module):
    """Trend = the mean of moving averages of several kernels (ends padded by repetition); seasonal = x - trend."""

    def __init__(self, kernels: list[int]):
        super().__init__()
        self.decompositions = nn.ModuleList(TimeDecomposition(k) for k in kernels)

    def forward(self, x: torch.Tensor):
        trend = torch.stack([decomposition(x)[1] for decomposition in self.decompositions]).mean(0)
        return x - trend, trend


class MIC(nn.Module):
    """Multi-scale isometric convolution layer on (batch, time, d_model).

    For each scale k the seasonal part (moving average of kernel k, made odd) goes through a downsampling
    convolution (kernel and stride k: local features), an isometric convolution whose kernel spans the whole
    downsampled sequence, zero-padded before it so that position j sees positions <= j (global correlations), a
    residual LayerNorm, and a transposed convolution back to the length (cut to it), added to the input and
    normalised; every convolution is followed by tanh and dropout. One LayerNorm serves every scale and both of
    its places, as in both codes. The scales are merged by a linear map of their concatenated features (the codes'
    Conv2d with kernel (scales, 1)), then a feed-forward block: variant official, x + Linear-ReLU-Dropout-Linear(x)
    (width 4 d_model, Glorot-initialised) then LayerNorm; variant tslib, x + two linear maps of LayerNorm(x) with no
    activation between them (TSLib's width-1 convolutions) then LayerNorm.
    """

    def __init__(self, d_model: int, length: int, conv_kernels: list[int], variant: str):
        super().__init__()
        self.length, self.tslib = length, variant == "tslib"
        D = d_model
        self.decompositions = nn.ModuleList(TimeDecomposition(decomposition_kernel(k)) for k in conv_kernels)
        self.down = nn.ModuleList(nn.Conv1d(D, D, k, stride=k, padding=k // 2) for k in conv_kernels)
        self.isometric = nn.ModuleList(nn.Conv1d(D, D, isometric_kernel(length, k)) for k in conv_kernels)
        self.up = nn.ModuleList(nn.ConvTranspose1d(D, D, k, stride=k) for k in conv_kernels)
        self.norm = nn.LayerNorm(D)
        self.merge = nn.Linear(len(conv_kernels) * D, D)
        self.dropout = Dropout(MIC_DROPOUT)
        if self.tslib:
            self.ffn_input_norm = nn.LayerNorm(D)
            self.ffn = nn.Sequential(nn.Linear(D, 4 * D), nn.Linear(4 * D, D))
        else:
            self.ffn = nn.Sequential(nn.Linear(D, 4 * D), nn.ReLU(), Dropout(MIC_DROPOUT), nn.Linear(4 * D, D))
            for layer in (self.ffn[0], self.ffn[3]):
                nn.init.xavier_uniform_(layer.weight)
                nn.init.zeros_(layer.bias)
        self.ffn_norm = nn.LayerNorm(D)

    def scale(self, x: torch.Tensor, i: int) -> torch.Tensor:
        h = self.dropout(torch.tanh(self.down[i](x.transpose(1, 2))))  # (B, D, downsampled length)
        g = self.dropout(torch.tanh(self.isometric[i](F.pad(h, (h.shape[-1] - 1, 0)))))
        h = self.norm((g + h).transpose(1, 2)).transpose(1, 2)
        h = self.dropout(torch.tanh(self.up[i](h)))[..., :self.length]
        return self.norm(h.transpose(1, 2) + x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        merged = self.merge(torch.cat([self.scale(decomposition(x)[0], i)
                                       for i, decomposition in enumerate(self.decompositions)], dim=-1))
        return self.ffn_norm(merged + self.ffn(self.ffn_input_norm(merged) if self.tslib else merged))


class Model(nn.Module):
    """MICN: Multi-scale Isometric Convolution Network.

    Wang, Peng, Huang, Wang, Chen, Xiao. "MICN: Multi-scale Local and Global Context Modeling for Long-term Series
    Forecasting." ICLR 2023. https://openreview.net/forum?id=zt53IDUR1U (no arXiv version; official code:
    github.com/wanghq21/MICN; TSLib's models/MICN.py)

    The window is split into trend and seasonal parts by the mean of moving averages of every scale's kernel
    (multi-scale hybrid decomposition). Trend: a linear map over time from the window's trend to the horizon
    (MICN-regre; weights initialised to 1 / horizon), or the window's mean (MICN-mean, --trend mean). Seasonal: the
    window's seasonal part followed by horizon zeros is embedded (value convolution + position + the calendar
    features of window and horizon: TSLib's label_len = seq_len, which its MICN scripts pass), goes through d_layers
    MIC layers, one scale per entry of conv_kernel, and is projected back to the channels (k values each with
    n_outputs k, the trend added to each); its last horizon points plus the trend are the forecast.

    Defaults are the official run.py's and scripts' (conv_kernel 12,16, one layer of d_model 512, dropout 0.05);
    --dropout is the embedding's, the MIC layers' is 0.05 in both codes. variant: the official feed-forward block or
    TSLib's (MIC); everything else is the same in both codes, and TSLib passes its run.py's dropout (0.1) where the
    official run.py has 0.05.

    Deviations from the official code (and TSLib's):
    - Embeddings: TSLib's (models.layers.embed), whose value convolution and calendar linear map have no bias;
      the official ones have biases. Calendar features are the framework's (timeF, the official default).
    - The merge Conv2d with kernel (scales, 1) is the linear map of the concatenated scales that it equals, and
      the width-1 convolutions of TSLib's feed-forward block are linear layers (the same initial distributions).
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=True, time_marks=True,
                                future_marks=True, multi_output=True)

    @dataclass
    class Config:
        d_model: int = d_model(512)
        d_layers: int = hparam(1, "number of MIC layers", tiny=1, low=1)
        dropout: float = dropout(0.05)
        conv_kernel: str = hparam("12,16", "comma-separated kernels (and strides) of the downsampling convolutions, "
                                           "one scale each; the decomposition kernels are these made odd")
        trend: str = hparam("regre", "trend-cyclical prediction: a linear regression over time (MICN-regre) or the "
                                     "window's mean (MICN-mean)", choices=("regre", "mean"))
        variant: str = hparam("official", "MICN's feed-forward block: official (wanghq21/MICN: ReLU, no input norm) or "
                                          "tslib (TSLib's port: LayerNorm, then two linear maps without activation)",
                              choices=("official", "tslib"))

    def __init__(self, configs):
        super().__init__()
        L, H, C = configs.seq_len, configs.output_token_len, configs.enc_in
        self.horizon, self.n_outputs = H, configs.n_outputs
        kernels = int_list("conv_kernel", configs.conv_kernel)
        self.decomposition = MultiDecomposition([decomposition_kernel(k) for k in kernels])
        self.embedding = DataEmbedding(C, configs.d_model, configs.n_marks, configs.dropout)
        self.layers = nn.ModuleList(MIC(configs.d_model, L + H, kernels, configs.variant)
                                    for _ in range(configs.d_layers))
        self.projection = nn.Linear(configs.d_model, C * self.n_outputs)
        if configs.trend == "regre":
            self.regression = nn.Linear(L, H)
            nn.init.constant_(self.regression.weight, 1 / H)  # both codes (DLinear's idea, scaled by the horizon)
        else:
            self.regression = None

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        seasonal, trend = self.decomposition(x)
        if self.regression is not None:
            trend = self.regression(trend.transpose(1, 2)).transpose(1, 2)
        else:
            trend = x.mean(1, keepdim=True).expand(-1, self.horizon, -1)
        h = self.embedding(F.pad(seasonal, (0, 0, 0, self.horizon)), x_mark)  # (B, seq_len + horizon, D)
        for layer in self.layers:
            h = layer(h)
        seasonal = split_points(self.projection(h[:, -self.horizon:]), self.n_outputs)
        return seasonal + (trend[..., None] if self.n_outputs > 1 else trend)
