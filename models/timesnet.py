import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, d_ff, d_model, dropout, e_layers, hparam, use_norm
from models.layers.embed import DataEmbedding
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import split_points


def dominant_periods(x: torch.Tensor, k: int):
    """The k periods with the largest mean FFT amplitude over the batch and channels of x (B, T, D).

    Returns the periods (Python ints: they set tensor shapes) and each sample's amplitude at them (B, k).
    """
    amplitude = torch.fft.rfft(x.float(), dim=1).abs()
    spectrum = amplitude.mean(dim=(0, 2))
    spectrum[0] = 0  # the mean is no period
    freqs = torch.topk(spectrum, k).indices
    periods = [x.shape[1] // max(f, 1) for f in freqs.tolist()]
    return periods, amplitude.mean(-1)[:, freqs]


class InceptionBlock(nn.Module):
    """Mean of 2D convolutions with kernels 1, 3, ..., 2*num_kernels - 1 ('same' padding).

    Computed as the one convolution it equals: 'same' convolutions are linear, so their mean is a convolution
    with the mean of their kernels, each zero-padded to the largest: (2n-1)^2 taps per output instead of the
    sum of (2i+1)^2 (121 against 286 for six kernels). The parameters stay one Conv2d per kernel, as the paper's.
    Taps farther from the centre than the grid is long only ever meet the zero padding, so the kernel is cropped
    to the taps that reach it (same result): a fold at period 2 is 2 wide and needs 3 of the 11 columns.
    """

    def __init__(self, c_in: int, c_out: int, num_kernels: int):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(c_in, c_out, 2 * i + 1, padding=i) for i in range(num_kernels))
        for conv in self.convs:
            nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
            nn.init.zeros_(conv.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = len(self.convs) - 1
        weight = torch.stack([F.pad(conv.weight, [pad - i] * 4) for i, conv in enumerate(self.convs)]).mean(0)
        bias = torch.stack([conv.bias for conv in self.convs]).mean(0)
        reach_h, reach_w = (min(pad, n - 1) for n in x.shape[-2:])
        weight = weight[..., pad - reach_h:pad + reach_h + 1, pad - reach_w:pad + reach_w + 1]
        return F.conv2d(x, weight, bias, padding=(reach_h, reach_w))


class TimesBlock(nn.Module):
    """Fold the 1D series into 2D (cycles x phase) for each dominant period, convolve, unfold, and
    aggregate the periods weighted by the softmax of their amplitudes; residual connection."""

    def __init__(self, d_model: int, d_ff: int, num_kernels: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.conv = nn.Sequential(InceptionBlock(d_model, d_ff, num_kernels), nn.GELU(),
                                  InceptionBlock(d_ff, d_model, num_kernels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        periods, weights = dominant_periods(x, self.top_k)
        outs = []
        for p in periods:
            length = math.ceil(T / p) * p
            folded = F.pad(x, (0, 0, 0, length - T)).reshape(B, length // p, p, D).permute(0, 3, 1, 2)
            outs.append(self.conv(folded).permute(0, 2, 3, 1).reshape(B, length, D)[:, :T])
        weights = torch.softmax(weights, dim=1).to(x.dtype)
        return torch.einsum("btdk,bk->btd", torch.stack(outs, dim=-1), weights) + x


class Model(nn.Module):
    """TimesNet: temporal 2D-variation modeling for general time series analysis.

    Wu, Hu, Liu, Zhou, Wang, Long. "TimesNet: Temporal 2D-Variation Modeling for General Time Series
    Analysis." ICLR 2023. https://arxiv.org/abs/2210.02186

    The embedded input (value convolution + position + calendar features) is extended linearly in
    time to seq_len + horizon; TimesBlocks find the top_k periods by FFT, reshape the series into
    2D tensors of (number of cycles, period) and apply inception convolutions; a linear projection
    returns to the channels (k values each with n_outputs k). All channels share the embedding, so
    covariates inform the target.
    """
    capabilities = Capabilities(direct=True, covariate=True, time_marks=True, multi_output=True)

    @dataclass
    class Config:
        d_model: int = d_model()
        d_ff: int = d_ff()
        e_layers: int = e_layers()
        top_k: int = hparam(5, "number of dominant periods", tiny=2, low=1)
        num_kernels: int = hparam(6, "convolutions per inception block", tiny=2, low=1)
        dropout: float = dropout()
        use_norm: bool = use_norm()

    def __init__(self, configs):
        super().__init__()
        if configs.top_k > configs.seq_len // 2:
            raise ValueError(f"top_k {configs.top_k} exceeds the {configs.seq_len // 2} frequencies of seq_len")
        self.use_norm, self.horizon, self.n_outputs = configs.use_norm, configs.output_token_len, configs.n_outputs
        self.embedding = DataEmbedding(configs.enc_in, configs.d_model, configs.n_marks, configs.dropout)
        self.extend = nn.Linear(configs.seq_len, configs.seq_len + self.horizon)
        self.blocks = nn.ModuleList(TimesBlock(configs.d_model, configs.d_ff, configs.num_kernels, configs.top_k)
                                    for _ in range(configs.e_layers))
        self.norm = nn.LayerNorm(configs.d_model)
        self.projection = nn.Linear(configs.d_model, configs.enc_in * self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.use_norm:
            x, stats = normalize(x)
        h = self.extend(self.embedding(x, x_mark).transpose(1, 2)).transpose(1, 2)  # (B, L + H, D)
        for block in self.blocks:
            h = self.norm(block(h))
        out = split_points(self.projection(h)[:, -self.horizon:], self.n_outputs)
        return denormalize(out, stats) if self.use_norm else out
