from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, d_model, dropout, e_layers, hparam
from models.layers.embed import DataEmbedding
from models.layers.normalization import RevIN
from models.layers.outputs import channels_last, split_points


class ChebyKAN(nn.Module):
    """A Kolmogorov-Arnold layer with Chebyshev polynomials as its univariate functions: output o of input x is
    sum_i sum_n c[i, o, n] T_n(u_i), u = tanh(tanh(x)) (the official code squashes twice; |u| < 0.77, so arccos
    stays away from the ends of its domain), T_n(u) = cos(n arccos u) for n = 0 .. order. With order 0 the
    layer is a learned constant."""

    def __init__(self, d_in: int, d_out: int, order: int):
        super().__init__()
        self.coefficients = nn.Parameter(torch.empty(d_in, d_out, order + 1))
        nn.init.normal_(self.coefficients, mean=0.0, std=1 / (d_in * (order + 1)))
        self.register_buffer("degrees", torch.arange(order + 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., d_in) -> (..., d_out)
        angle = torch.acos(torch.tanh(torch.tanh(x)))
        return torch.einsum("...in,ion->...o", torch.cos(angle[..., None] * self.degrees), self.coefficients)


class MultiOrderKAN(nn.Module):
    """One frequency band's representation learning (the official M_KAN): a Chebyshev KAN of the band's order
    across the d_model features of each step, plus a depthwise convolution (width 3, zero padding, no bias)
    along time of each feature."""

    def __init__(self, d_model: int, order: int):
        super().__init__()
        self.kan = ChebyKAN(d_model, d_model, order)
        self.conv = nn.Conv1d(d_model, d_model, kernel_size=3, padding=1, groups=d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, T, D)
        return self.kan(x) + self.conv(x.transpose(1, 2)).transpose(1, 2)


def upsample(x: torch.Tensor, length: int) -> torch.Tensor:
    """x (N, T, D) brought to `length` steps along time by zero-padding its rfft spectrum, scaled by
    T / length as the official frequency_interpolation (so a constant comes back divided by (length / T)^2)."""
    T = x.shape[1]
    spectrum = torch.fft.rfft(x.float(), dim=1)
    padded = F.pad(spectrum, (0, 0, 0, length // 2 + 1 - spectrum.shape[1]))
    return torch.fft.irfft(padded, n=length, dim=1) * (T / length)


class FrequencyBlock(nn.Module):
    """One layer: cascaded frequency decomposition, then multi-order KAN learning and frequency mixing.

    Decomposition: the coarsest scale is the lowest band; every finer scale minus the next coarser one upsampled is
    a band of higher frequencies. Mixing, coarse to fine: the coarsest band through its KAN; each finer band through
    its own KAN (one order more per scale) plus the mixed band below it upsampled. The scales out are the mixed
    bands."""

    def __init__(self, d_model: int, n_scales: int, begin_order: int):
        super().__init__()
        # index 0 the finest scale: the highest order, begin_order + n_scales - 1
        self.kans = nn.ModuleList(MultiOrderKAN(d_model, begin_order + n_scales - 1 - k) for k in range(n_scales))

    def forward(self, scales: list) -> list:  # each (N, T_k, D), finest first
        bands = [fine - upsample(coarse, fine.shape[1]) for fine, coarse in zip(scales, scales[1:])] + scales[-1:]
        mixed = [self.kans[-1](bands[-1])]
        for k in reversed(range(len(bands) - 1)):
            mixed.insert(0, self.kans[k](bands[k]) + upsample(mixed[0], bands[k].shape[1]))
        return mixed


class Model(nn.Module):
    """TimeKAN: cascaded frequency decomposition of multi-scale embeddings, learned per band by Chebyshev KANs of
    increasing order, then mixed back from low to high frequencies.

    Huang, Zhao, Li, Bai. "TimeKAN: KAN-based Frequency Decomposition Learning Architecture for
    Long-term Time Series Forecasting." ICLR 2025. https://arxiv.org/abs/2502.06910 (official code:
    github.com/huangst21/TimeKAN, models/TimeKAN.py and layers/ChebyKANLayer.py; TSLib has no port)

    Every channel is its own series. The window is average-pooled (down_sampling_window) into
    down_sampling_layers + 1 scales; each scale is RevIN-normalised with its own affine parameters and embedded
    step by step into d_model (TSLib's width-3 circular convolution, then dropout). Each of e_layers blocks
    (FrequencyBlock) splits the scales into frequency bands (each scale minus the next-coarser one FFT-upsampled;
    the coarsest scale is the lowest band), passes each band through a multi-order KAN block (a Chebyshev KAN across
    features of order begin_order at the coarsest band, one more per finer band, plus a depthwise convolution along
    time) and mixes
    the bands from low to high frequencies by FFT upsampling. The finest mixed scale is mapped over time to the horizon
    (a linear layer), then over features to each point (k values with n_outputs k), and the finest scale's RevIN is
    undone. Defaults: the official run.py's d_model 16, e_layers 2, dropout 0.1, begin_order 1; the
    down-sampling of most official scripts (2 coarser scales of window 2), where run.py has none.

    Deviations from the official code:
    - Upsampling takes the inverse rfft at the target length (the official one at the even length the padded
      spectrum implies, which breaks odd scale lengths); the FFTs run in float32 under mixed precision.
    - No calendar features: the official model builds calendar and position embeddings it never calls (the marks
      are not passed) and a series decomposition it never uses; none exists here.
    - At least one coarser scale (the official code fails with none, its run.py's default).
    - use_norm off skips the RevIN modules altogether (the official code keeps their unused parameters).
    """
    capabilities = Capabilities(direct=True, covariate=False, multi_output=True)  # channel-independent

    @dataclass
    class Config:
        d_model: int = d_model(16)
        e_layers: int = e_layers(2)
        down_sampling_layers: int = hparam(2, "number of coarser scales", tiny=2, low=1)
        down_sampling_window: int = hparam(2, "pooling window between scales", low=1)
        begin_order: int = hparam(1, "Chebyshev order of the KAN of the lowest band; each higher band one more",
                                  low=0)
        dropout: float = dropout(0.1)
        use_norm: bool = hparam(True, "RevIN (per-scale learnable affine) normalisation of each window")

    def __init__(self, configs):
        super().__init__()
        window, n_down = configs.down_sampling_window, configs.down_sampling_layers
        if configs.seq_len % window ** n_down:
            raise ValueError(f"seq_len {configs.seq_len} must be divisible by down_sampling_window ** "
                             f"down_sampling_layers = {window ** n_down}")
        self.window, self.n_scales, self.n_outputs = window, n_down + 1, configs.n_outputs
        self.revins = nn.ModuleList(RevIN(configs.enc_in, inverse_eps=1e-10) for _ in range(self.n_scales)) \
            if configs.use_norm else None
        self.embedding = DataEmbedding(1, configs.d_model, 0, configs.dropout, position=False)
        self.blocks = nn.ModuleList(FrequencyBlock(configs.d_model, self.n_scales, configs.begin_order)
                                    for _ in range(configs.e_layers))
        self.predictor = nn.Linear(configs.seq_len, configs.output_token_len)
        self.projection = nn.Linear(configs.d_model, self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        B, _, C = x.shape
        scales = [x]
        for _ in range(self.n_scales - 1):
            scales.append(F.avg_pool1d(scales[-1].transpose(1, 2), self.window).transpose(1, 2))
        hs = []
        for k, xk in enumerate(scales):
            if self.revins is not None:
                xk, scale_stats = self.revins[k].normalize(xk)
                if k == 0:
                    stats = scale_stats  # the finest scale's statistics undo the forecast's normalisation
            hs.append(self.embedding(xk.transpose(1, 2).reshape(B * C, -1, 1), None))
        for block in self.blocks:
            hs = block(hs)
        out = self.projection(self.predictor(hs[0].transpose(1, 2)).transpose(1, 2))  # (B * C, P, k)
        out = channels_last(split_points(out.reshape(B, C, -1), self.n_outputs))
        return self.revins[0].denormalize(out, stats) if self.revins is not None else out
