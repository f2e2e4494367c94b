from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, d_model, dropout, hparam, use_norm
from models.layers.decomposition import SeriesDecomposition
from models.layers.dropout import Dropout
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points


# From this kernel size on, the CPU runs a depthwise convolution as Toeplitz matrix products: faster than oneDNN's
# depthwise kernel from 25 on (1.2-1.6x at 25 and 31, 1.9-2.6x at 51, 2.0-3.3x at 101), slower at 5 and 13
# (0.77-0.99x); forward and backward, one thread (scripts/benchmark/moderntcn_convs.py, docs/performance.md).
TOEPLITZ_FROM = 25


class DepthwiseConv1d(nn.Conv1d):
    """A depthwise convolution: one filter per channel, no bias, odd kernel, the length kept.

    On the CPU a long kernel is applied as batched matrix products, with the same weight and the same function:
    the padded sequence is cut into tiles of T = min(N, 2K) outputs (each with its K - 1 neighbours), and each
    channel's tiles are multiplied by that channel's T x (T + K - 1) Toeplitz matrix of its filter, so the work stays
    about 3 times the direct convolution's at any length, at matrix-product speed."""

    def __init__(self, channels: int, kernel: int):
        super().__init__(channels, channels, kernel, padding=kernel // 2, groups=channels, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        K = self.kernel_size[0]
        if x.device.type != "cpu" or K < TOEPLITZ_FROM:
            return super().forward(x)
        return self.toeplitz(x)

    def toeplitz(self, x: torch.Tensor) -> torch.Tensor:
        K = self.kernel_size[0]
        B, C, N = x.shape
        T = min(N, 2 * K)
        n_tiles, span = -(-N // T), T + K - 1
        padded = nn.functional.pad(x, (K // 2, K // 2 + n_tiles * T - N))
        tiles = padded.unfold(-1, span, T).permute(1, 0, 2, 3).reshape(C, B * n_tiles, span)
        lag = torch.arange(span, device=x.device)[None, :] - torch.arange(T, device=x.device)[:, None]
        toeplitz = self.weight[:, 0, lag.clamp(0, K - 1)] * ((lag >= 0) & (lag < K))  # (C, T, span)
        y = torch.bmm(tiles, toeplitz.transpose(1, 2))  # (C, B * n_tiles, T)
        return y.reshape(C, B, n_tiles * T)[..., :N].transpose(0, 1)


class GroupedPointwiseConv1d(nn.Conv1d):
    """A grouped convolution of kernel 1: per group, one linear map of its channels at every position. On the CPU it
    runs as one batched matrix product over the groups, the same function with the same weight and bias (oneDNN's
    grouped kernel is 1.4-2.0x slower at ModernTCN's ETTh1 sizes, forward and backward, one thread)."""

    def __init__(self, in_channels: int, out_channels: int, groups: int):
        super().__init__(in_channels, out_channels, 1, groups=groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu":
            return super().forward(x)
        return self.matmul(x)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        B, _, N = x.shape
        g = self.groups
        c_in, c_out = self.in_channels // g, self.out_channels // g
        columns = x.reshape(B, g, c_in, N).permute(1, 2, 0, 3).reshape(g, c_in, B * N)
        y = torch.baddbmm(self.bias.view(g, c_out, 1), self.weight.view(g, c_out, c_in), columns)
        return y.view(g, c_out, B, N).permute(2, 0, 1, 3).reshape(B, g * c_out, N)


def conv_norm(channels: int, kernel: int) -> nn.Sequential:
    """A depthwise convolution and its BatchNorm."""
    return nn.Sequential(DepthwiseConv1d(channels, kernel), nn.BatchNorm1d(channels))


class Block(nn.Module):
    """One ModernTCN block on (B, M, D, N): M variables of D features over N patches.

    DWConv: a large-kernel depthwise convolution over the patches, per variable and feature, plus a small-kernel one
    (structural re-parameterisation: the two are one convolution at inference, trained as two, each with its
    BatchNorm); then BatchNorm over the D features. ConvFFN1: a pointwise MLP per variable (D -> D ffn_ratio -> D,
    grouped over the variables); ConvFFN2: one per feature across the variables (M -> M ffn_ratio -> M, grouped over
    the features). Residual around the whole block."""

    def __init__(self, n_vars: int, d_model: int, ffn_ratio: int, large: int, small: int, dropout: float):
        super().__init__()
        M, D, F = n_vars, d_model, d_model * ffn_ratio
        self.large = conv_norm(M * D, large)
        self.small = conv_norm(M * D, small) if small else None
        self.norm = nn.BatchNorm1d(D)
        self.ffn1 = nn.Sequential(GroupedPointwiseConv1d(M * D, M * F, M), Dropout(dropout), nn.GELU(),
                                  GroupedPointwiseConv1d(M * F, M * D, M), Dropout(dropout))
        self.ffn2 = nn.Sequential(GroupedPointwiseConv1d(D * M, M * F, D), Dropout(dropout), nn.GELU(),
                                  GroupedPointwiseConv1d(M * F, D * M, D), Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, M, D, N = x.shape
        h = x.reshape(B, M * D, N)
        h = self.large(h) + self.small(h) if self.small is not None else self.large(h)
        h = self.norm(h.reshape(B * M, D, N)).reshape(B, M * D, N)
        h = self.ffn1(h).reshape(B, M, D, N).transpose(1, 2).reshape(B, D * M, N)  # variables inner: per feature
        h = self.ffn2(h).reshape(B, D, M, N).transpose(1, 2)
        return x + h


class Backbone(nn.Module):
    """Patchify, stages of blocks (a downsampling convolution between stages), the flatten head; on (B, L, M),
    instance-normalised per window and variable when use_norm."""

    def __init__(self, configs):
        super().__init__()
        M, D, P, S, r = (configs.enc_in, configs.d_model, configs.patch_size, configs.patch_stride,
                         configs.downsample_ratio)
        self.patch_size, self.patch_stride, self.ratio = P, S, r
        self.use_norm, self.n_outputs = configs.use_norm, configs.n_outputs
        # the stem embeds each variable's patches alone; the later ones merge r neighbouring patches
        self.downsample = nn.ModuleList([nn.Sequential(nn.Conv1d(1, D, P, stride=S), nn.BatchNorm1d(D))])
        self.downsample.extend(nn.Sequential(nn.BatchNorm1d(D), nn.Conv1d(D, D, r, stride=r))
                               for _ in range(configs.stages - 1))
        self.stages = nn.ModuleList(
            nn.ModuleList(Block(M, D, configs.ffn_ratio, configs.large_size, configs.small_size, configs.dropout)
                          for _ in range(configs.num_blocks))
            for _ in range(configs.stages))
        N = configs.seq_len // S  # patches after the stem (the window padded at the end by P - S points)
        for _ in range(configs.stages - 1):
            N = -(-N // r)
        self.head = nn.Sequential(nn.Flatten(start_dim=-2),
                                  nn.Linear(D * N, configs.output_token_len * self.n_outputs),
                                  Dropout(configs.head_dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_norm:
            x, stats = normalize(x)
        B, L, M = x.shape
        h = x.transpose(1, 2).reshape(B * M, 1, L)
        for i, (down, blocks) in enumerate(zip(self.downsample, self.stages)):
            if i == 0:
                h = torch.cat([h, h[..., -1:].expand(-1, -1, self.patch_size - self.patch_stride)], dim=-1)
            elif h.shape[-1] % self.ratio:  # completed by its own last points, as the official code
                h = torch.cat([h, h[..., -(self.ratio - h.shape[-1] % self.ratio):]], dim=-1)
            h = down(h)
            h = h.reshape(B, M, *h.shape[1:])
            for block in blocks:
                h = block(h)
            h = h.flatten(0, 1)
        out = channels_last(split_points(self.head(h.reshape(B, M, *h.shape[1:])), self.n_outputs))
        return denormalize(out, stats) if self.use_norm else out


class Model(nn.Module):
    """ModernTCN: a pure convolutional network of patches, with large-kernel depthwise convolutions over time and
    two pointwise feed-forward networks, one within each variable and one across the variables.

    Luo, Wang. "ModernTCN: A Modern Pure Convolution Structure for General Time Series Analysis." ICLR 2024.
    https://openreview.net/forum?id=vpJMJerXHU (official code: github.com/luodhhh/ModernTCN,
    ModernTCN-Long-term-forecasting/models/ModernTCN.py and ModernTCN_Layer.py)

    Each variable's window, standardised per window and variable (use_norm: the official RevIN with affine 0, its
    default), is padded at the end by patch_size - patch_stride repeats of its last point and embedded by a
    convolution of kernel patch_size and stride patch_stride to d_model features per patch (BatchNorm). `stages`
    stages of num_blocks blocks each (Block) follow; between stages a BatchNorm and a convolution of kernel and
    stride downsample_ratio merge neighbouring patches (their count first completed to a multiple by repeating its
    last ones). The head flattens each variable's features and patches and maps them linearly to the horizon
    (dropout head_dropout). With `decomposition` the window is split into a moving-average trend (kernel
    moving_avg) and the remainder, each forecast by a backbone of its own (its own normalisation), and the two
    forecasts summed. Defaults are what every official long-term script sets (patch 8 stride 4, kernels 51 and 5,
    64 features, one stage of one block) and the ETTh1 script's (ffn_ratio 1, dropout 0.3, head_dropout 0).

    Deviations from the official code: every stage has the same width and kernels (the official lists --dims,
    --large_size, --small_size per stage, all equal in every script); the modules the official forecasting model
    builds but never calls are not built (the calendar-feature embedding te_patch, the multi-scale fusion layers,
    the downsampling layers beyond the stages used), so the initialisation draws differ; --use_multi_scale, which
    only sizes the head (correctly for one stage, for several it breaks the official model), --individual heads and
    --affine RevIN, which no script sets, are not offered; the large and small kernels must be odd (even ones
    change the length in the official code, breaking the residual); the small-kernel branch is not merged into the
    large one after training (the same function).
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=True,  # ConvFFN2 mixes the variables
                                multi_output=True)

    @dataclass
    class Config:
        patch_size: int = hparam(8, "points per patch (the stem convolution's kernel)", tiny=4, low=1)
        patch_stride: int = hparam(4, "distance between patch starts", tiny=2, low=1)
        d_model: int = d_model(64)
        ffn_ratio: int = hparam(1, "hidden width of both ConvFFNs, as a multiple of their input width", low=1)
        stages: int = hparam(1, "stages of blocks, each but the first after a downsampling", tiny=2, low=1)
        num_blocks: int = hparam(1, "blocks per stage", low=1)
        downsample_ratio: int = hparam(2, "patches merged by the downsampling between stages", low=1)
        large_size: int = hparam(51, "large depthwise kernel (odd)", tiny=7, low=1)
        small_size: int = hparam(5, "small depthwise kernel of the re-parameterisation branch (odd; 0: none)",
                                 tiny=3, low=0)
        dropout: float = dropout(0.3)
        head_dropout: float = hparam(0.0, "dropout on the forecast head's output", tiny=0.0, low=0.0, high=1.0)
        use_norm: bool = use_norm(True)
        decomposition: bool = hparam(False, "forecast the moving-average trend and the remainder by two backbones")
        moving_avg: int = hparam(25, "decomposition: moving-average kernel", tiny=5, low=1)

    def __init__(self, configs):
        super().__init__()
        for name in ("large_size", "small_size"):
            if getattr(configs, name) % 2 == 0 and getattr(configs, name):
                raise ValueError(f"{name} {getattr(configs, name)} must be odd: an even kernel changes the length")
        if configs.small_size > configs.large_size:
            raise ValueError(f"small_size {configs.small_size} exceeds large_size {configs.large_size}")
        if configs.seq_len < configs.patch_stride:
            raise ValueError(f"seq_len {configs.seq_len} is shorter than patch_stride {configs.patch_stride}")
        self.decomposition = SeriesDecomposition(configs.moving_avg) if configs.decomposition else None
        self.branches = nn.ModuleList(Backbone(configs) for _ in range(2 if configs.decomposition else 1))

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.decomposition is None:
            return self.branches[0](x)
        seasonal, trend = self.decomposition(x.transpose(1, 2))
        return self.branches[0](seasonal.transpose(1, 2)) + self.branches[1](trend.transpose(1, 2))
