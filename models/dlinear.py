from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, hparam, use_norm
from models.layers.decomposition import SeriesDecomposition
from models.layers.linear import ChannelLinear
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points


class Model(nn.Module):
    """DLinear: decomposition + two linear layers over time, one for trend and one for the remainder.

    Zeng, Chen, Zhang, Xu. "Are Transformers Effective for Time Series Forecasting?" AAAI 2023.
    https://arxiv.org/abs/2205.13504

    use_norm (instance normalisation around the model) is off in the paper.
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=False,  # channel-independent
                                multi_output=True)

    @dataclass
    class Config:
        moving_avg: int = hparam(25, "moving-average kernel of the series decomposition", tiny=5, low=1)
        individual: bool = hparam(False, "one linear layer per channel")
        use_norm: bool = use_norm()

    def __init__(self, configs):
        super().__init__()
        self.use_norm = configs.use_norm
        self.decomposition = SeriesDecomposition(configs.moving_avg)
        L, P = configs.seq_len, configs.output_token_len * configs.n_outputs
        self.n_outputs = configs.n_outputs
        if configs.individual:
            self.seasonal = ChannelLinear(configs.enc_in, L, P)
            self.trend = ChannelLinear(configs.enc_in, L, P)
        else:
            self.seasonal, self.trend = nn.Linear(L, P), nn.Linear(L, P)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.use_norm:
            x, stats = normalize(x)
        seasonal, trend = self.decomposition(x.transpose(1, 2))
        out = channels_last(split_points(self.seasonal(seasonal) + self.trend(trend), self.n_outputs))
        return denormalize(out, stats) if self.use_norm else out
