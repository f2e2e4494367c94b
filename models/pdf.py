import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, d_ff, d_model, dropout, e_layers, hparam, n_heads
from models.layers.dropout import Dropout
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import per_series
from models.layers.transformer import BatchNormTokens


def positive_ints(text: str, name: str) -> list:
    try:
        found = [int(n) for n in text.split(",")]
    except ValueError:
        raise ValueError(f"{name} must be comma-separated integers, got {text!r}") from None
    if min(found) < 1:
        raise ValueError(f"{name} must be positive, got {text!r}")
    return found


class ResidualAttentionLayer(nn.Module):
    """PatchTST's post-norm encoder layer with residual attention (RealFormer): each layer adds the previous
    layer's pre-softmax scores to its own and passes the sum on. BatchNorm over the features of every token; the
    attention output passes two dropouts (the official projection's and the residual branch's)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} must be divisible by n_heads {n_heads}")
        self.n_heads, self.scale = n_heads, (d_model // n_heads) ** -0.5
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), Dropout(dropout), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2 = BatchNormTokens(d_model), BatchNormTokens(d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor, previous: torch.Tensor | None):
        B, S, D = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) * self.scale
        if previous is not None:
            scores = scores + previous
        attended = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, S, D)
        x = self.norm1(x + self.dropout(self.dropout(self.out(attended))))
        return self.norm2(x + self.dropout(self.ffn(x))), scores


class PeriodBranch(nn.Module):
    """One period p of the multi-periodic decoupling: a series (N, L), zero-padded at the end to n = ceil(L / p)
    whole periods, is the 2D grid (N, n, p) of its periods (rows) by phase (columns).

    Short-term variations: depthwise convolutions along each period (one filter per row, 'same' padding, SELU
    after each of `kernels`), then dropout, read back in time order. Long-term variations: the grid's columns,
    zero-padded to a multiple of patch_len, are cut into tokens of patch_len phases across all n periods every
    `stride` phases; a convolution spanning all rows embeds each to n x patch_len features, which a linear layer
    projects to d_model. With a learnt position embedding, e_layers residual-attention layers relate the tokens,
    and their flattened output is mapped linearly to L (no map where that is already L). The branch returns the sum
    of both: (N, L)."""

    def __init__(self, seq_len: int, period: int, patch_len: int, stride: int, kernels: list, d_model: int,
                 n_heads: int, e_layers: int, d_ff: int, dropout: float, conv_dropout: float):
        super().__init__()
        self.period, self.rows = period, math.ceil(seq_len / period)
        self.columns = math.ceil(period / patch_len) * patch_len
        n_tokens, width = (self.columns - patch_len) // stride + 1, self.rows * patch_len
        self.local = nn.Sequential(*(nn.Sequential(nn.Conv1d(self.rows, self.rows, k, padding=k // 2,
                                                             groups=self.rows), nn.SELU()) for k in kernels),
                                   Dropout(conv_dropout))
        self.embedding = nn.Conv2d(1, width, kernel_size=(self.rows, patch_len), stride=(self.rows, stride))
        self.projection = nn.Linear(width, d_model)
        self.position = nn.Parameter(torch.empty(n_tokens, d_model).uniform_(-0.02, 0.02))
        self.dropout = Dropout(dropout)
        self.layers = nn.ModuleList(ResidualAttentionLayer(d_model, n_heads, d_ff, dropout) for _ in range(e_layers))
        flat = n_tokens * d_model
        self.flatten_map = nn.Linear(flat, seq_len) if flat != seq_len else nn.Identity()

    def forward(self, series: torch.Tensor) -> torch.Tensor:
        N, L = series.shape
        grid = F.pad(series, (0, self.rows * self.period - L)).view(N, self.rows, self.period)
        local = self.local(grid).flatten(1)[:, :L]
        columns = F.pad(grid, (0, self.columns - self.period)).unsqueeze(1)
        tokens = self.embedding(columns).flatten(2).transpose(1, 2)  # (N, tokens, n x patch_len)
        h, scores = self.dropout(self.projection(tokens) + self.position), None
        for layer in self.layers:
            h, scores = layer(h, scores)
        return self.flatten_map(h.transpose(1, 2).flatten(1)) + local  # flattened feature-major, as the official


class Model(nn.Module):
    """PDF: the Periodicity Decoupling Framework, short- and long-term variations of each period's 2D view.

    Dai, Wu, Liu, Li, Bao, Jiang, Xia. "Periodicity Decoupling Framework for Long-term Series Forecasting."
    ICLR 2024. https://openreview.net/forum?id=dp27P5HBBt (official code: github.com/Hank0626/PDF,
    models/PDF.py and layers/PDF_backbone.py; the same in github.com/decisionintelligence/TFB)

    Every channel is its own series, standardised per window (RevIN without affine, as every official script).
    Multi-periodic decoupling block: one PeriodBranch per period of `periods`, each with its own patch length and
    stride. The paper picks the periods by the FFT amplitudes of the training data; the official code takes them
    from its --period flag, fixed per dataset in its scripts, as here. Dual variations modeling block: each
    branch's convolutions within periods (short-term) plus attention across periods (long-term). Variations
    aggregation block: the branches' outputs concatenated (or averaged: aggregation mean, TFB's default `add`) and
    mapped linearly to the horizon; the standardisation is undone. Defaults: the official ETTh1 script at lookback
    336 (horizons 96 to 336), its run_longExp.py's kernel_list and fc_dropout.

    Deviations from the official code: the ablations wo_conv and serial_conv, RevIN's affine and subtract_last and
    the head's dropout (0 in every official script) are not offered; the positional query and key projections the
    official attention builds but never uses are left out; query, key and value are one nn.Linear (the three
    official ones stacked); the window statistics are not detached (the input carries no gradient).
    """
    capabilities = Capabilities(direct=True, covariate=False, multi_output=True)  # channel-independent

    @dataclass
    class Config:
        periods: str = hparam("24", "comma-separated periods, one branch each (the official --period)", tiny="8,6")
        patch_lens: str = hparam("1", "comma-separated phases per long-term token, one per period (the official "
                                      "--patch_len)", tiny="2,4")
        strides: str = hparam("1", "comma-separated phases between long-term tokens, one per period (the official "
                                   "--stride); empty: half of each patch length", tiny="1,2")
        kernel_list: str = hparam("3,7,9", "comma-separated kernel sizes of the successive convolutions within "
                                           "periods", tiny="3,5")
        d_model: int = d_model(16)
        n_heads: int = n_heads(2)
        e_layers: int = e_layers(3)
        d_ff: int = d_ff(128)
        dropout: float = dropout(0.2)
        conv_dropout: float = hparam(0.0, "dropout after the convolutions within periods (the official "
                                          "fc_dropout)", low=0.0, high=1.0)
        aggregation: str = hparam("concat", "how the periods' outputs meet the forecast head: concatenated, or "
                                            "their mean (the official --add)", choices=("concat", "mean"))

    def __init__(self, configs):
        super().__init__()
        periods = positive_ints(configs.periods, "periods")
        patch_lens = positive_ints(configs.patch_lens, "patch_lens")
        strides = (positive_ints(configs.strides, "strides") if configs.strides.strip()
                   else [n // 2 for n in patch_lens])
        kernels = positive_ints(configs.kernel_list, "kernel_list")
        if not len(periods) == len(patch_lens) == len(strides):
            raise ValueError(f"periods, patch_lens and strides need one value per period, got {configs.periods!r}, "
                             f"{configs.patch_lens!r} and {configs.strides!r}")
        if min(strides) < 1:
            raise ValueError(f"a patch length of 1 needs a stride: half of it is 0 (patch_lens {configs.patch_lens})")
        L, self.n_outputs, self.concat = configs.seq_len, configs.n_outputs, configs.aggregation == "concat"
        self.branches = nn.ModuleList(
            PeriodBranch(L, period, patch_len, stride, kernels, configs.d_model, configs.n_heads, configs.e_layers,
                         configs.d_ff, configs.dropout, configs.conv_dropout)
            for period, patch_len, stride in zip(periods, patch_lens, strides))
        self.head = nn.Linear(L * (len(periods) if self.concat else 1), configs.output_token_len * self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        x, stats = normalize(x)
        return denormalize(per_series(self._forecast, x, self.n_outputs), stats)

    def _forecast(self, series: torch.Tensor) -> torch.Tensor:  # (N, L) -> (N, horizon, k)
        outs = [branch(series) for branch in self.branches]
        merged = torch.cat(outs, dim=-1) if self.concat else torch.stack(outs, dim=-1).mean(-1)
        return self.head(merged).view(len(series), -1, self.n_outputs)  # point-major: (horizon, k)
