from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, d_ff, d_model, dropout, e_layers, hparam, use_norm
from models.layers.decomposition import SeriesDecomposition
from models.layers.embed import DataEmbedding
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points


def _mlp(d_in: int, d_hidden: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.GELU(), nn.Linear(d_hidden, d_out))


class PastDecomposableMixing(nn.Module):
    """Decompose every scale into seasonal and trend parts; mix seasons bottom-up (fine -> coarse) and
    trends top-down (coarse -> fine) with MLPs along time, then a feed-forward network per scale."""

    def __init__(self, lengths: list, d_model: int, d_ff: int, moving_avg: int):
        super().__init__()
        self.decomposition = SeriesDecomposition(moving_avg)
        pairs = list(zip(lengths[:-1], lengths[1:]))
        self.season_down = nn.ModuleList(_mlp(fine, coarse, coarse) for fine, coarse in pairs)
        self.trend_up = nn.ModuleList(_mlp(coarse, fine, fine) for fine, coarse in pairs)
        self.ffn = _mlp(d_model, d_ff, d_model)

    def forward(self, xs: list) -> list:  # each (N, T_i, D)
        seasons, trends = zip(*(self.decomposition(x.transpose(1, 2)) for x in xs))  # each (N, D, T_i)
        mixed_seasons = [seasons[0]]
        for i, down in enumerate(self.season_down):
            mixed_seasons.append(seasons[i + 1] + down(mixed_seasons[-1]))
        mixed_trends = [trends[-1]]
        for i in reversed(range(len(self.trend_up))):
            mixed_trends.insert(0, trends[i] + self.trend_up[i](mixed_trends[0]))
        return [x + self.ffn((s + t).transpose(1, 2)) for x, s, t in zip(xs, mixed_seasons, mixed_trends)]


class Model(nn.Module):
    """TimeMixer: decomposable multiscale mixing, fully MLP-based.

    Wang, Wu, Shi, Hu, Luo, Ma, Zhang, Zhou. "TimeMixer: Decomposable Multiscale Mixing for Time
    Series Forecasting." ICLR 2024. https://arxiv.org/abs/2405.14616

    The input is average-pooled into down_sampling_layers + 1 scales (window down_sampling_window).
    Past-Decomposable-Mixing blocks mix seasonal parts bottom-up and trend parts top-down across
    scales; Future-Multipredictor-Mixing sums one linear predictor per scale, each projected from d_model
    to the forecast (k values a point with n_outputs k). Channels are independent (the paper's setting for
    long-term forecasting); each scale is normalised per window.

    No calendar features: the official code tiles them over the channel-major batch of series
    (x_mark.repeat(N, 1, 1)), so each series is embedded with the marks of another window of its batch
    and the published results come from a model whose marks say nothing about its window. Given its own
    window's marks, this model overfits ETTh1 (test MSE 0.43 instead of 0.38 at horizon 96).
    """
    capabilities = Capabilities(direct=True, covariate=False, multi_output=True)  # channel-independent
    revision = 2  # 2: without calendar features (runs of revision 1 read them)

    @dataclass
    class Config:
        d_model: int = d_model()
        d_ff: int = d_ff()
        e_layers: int = e_layers()
        down_sampling_layers: int = hparam(3, "number of coarser scales", tiny=2, low=0)
        down_sampling_window: int = hparam(2, "pooling window between scales", low=1)
        moving_avg: int = hparam(25, "moving-average kernel of the series decomposition", tiny=5, low=1)
        dropout: float = dropout()
        use_norm: bool = use_norm()

    def __init__(self, configs):
        super().__init__()
        window, n_down = configs.down_sampling_window, configs.down_sampling_layers
        if configs.seq_len % window ** n_down:
            raise ValueError(f"seq_len {configs.seq_len} must be divisible by down_sampling_window ** "
                             f"down_sampling_layers = {window ** n_down}")
        self.window, self.use_norm, self.n_outputs = window, configs.use_norm, configs.n_outputs
        self.lengths = [configs.seq_len // window ** i for i in range(n_down + 1)]
        self.embedding = DataEmbedding(1, configs.d_model, 0, configs.dropout, position=False)
        self.blocks = nn.ModuleList(PastDecomposableMixing(self.lengths, configs.d_model, configs.d_ff,
                                                           configs.moving_avg) for _ in range(configs.e_layers))
        self.predictors = nn.ModuleList(nn.Linear(n, configs.output_token_len) for n in self.lengths)
        self.projection = nn.Linear(configs.d_model, self.n_outputs)

    def _scales(self, x: torch.Tensor) -> list:
        """Average-pooled copies of x (B, L, C), finest first."""
        xs = [x]
        for _ in self.lengths[1:]:
            xs.append(F.avg_pool1d(xs[-1].transpose(1, 2), self.window).transpose(1, 2))
        return xs

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        B, _, C = x.shape
        hs = []
        for i, xi in enumerate(self._scales(x)):
            if self.use_norm:
                xi, scale_stats = normalize(xi)
                if i == 0:
                    stats = scale_stats  # the finest scale's statistics undo the output normalisation
            xi = xi.transpose(1, 2).reshape(B * C, -1, 1)  # every channel its own series
            hs.append(self.embedding(xi, None))
        for block in self.blocks:
            hs = block(hs)
        out = sum(self.projection(pred(h.transpose(1, 2)).transpose(1, 2)) for pred, h in zip(self.predictors, hs))
        out = channels_last(split_points(out.reshape(B, C, -1), self.n_outputs))  # (B * C, P, k) -> (B, P, C[, k])
        return denormalize(out, stats) if self.use_norm else out
