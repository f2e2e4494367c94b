import math

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities


class SeriesDecomposition(nn.Module):
    """Trend = moving average with the ends padded by repetition; seasonal = input - trend."""

    def __init__(self, kernel_size: int):
        super().__init__()
        self.kernel_size = kernel_size

    def forward(self, x: torch.Tensor):  # x: (B, C, L)
        front, back = (self.kernel_size - 1) // 2, self.kernel_size // 2
        padded = F.pad(x, (front, back), mode="replicate")
        trend = F.avg_pool1d(padded, self.kernel_size, stride=1)
        return x - trend, trend


class ChannelLinear(nn.Module):
    """A Linear(in, out) per channel (DLinear's `individual` mode) as one batched einsum."""

    def __init__(self, channels: int, in_features: int, out_features: int):
        super().__init__()
        bound = 1 / math.sqrt(in_features)  # nn.Linear's default initialisation
        self.weight = nn.Parameter(torch.empty(channels, out_features, in_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(channels, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, in) -> (B, C, out)
        return torch.einsum("bci,coi->bco", x, self.weight) + self.bias


class Model(nn.Module):
    """DLinear: decomposition + two linear layers over time, one for trend and one for the remainder.

    Zeng, Chen, Zhang, Xu. "Are Transformers Effective for Time Series Forecasting?" AAAI 2023.
    https://arxiv.org/abs/2205.13504

    Config: seq_len, output_token_len (the forecast length), enc_in, moving_avg, individual.
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=True)

    def __init__(self, configs):
        super().__init__()
        self.decomposition = SeriesDecomposition(configs.moving_avg)
        L, P = configs.seq_len, configs.output_token_len
        if configs.individual:
            self.seasonal = ChannelLinear(configs.enc_in, L, P)
            self.trend = ChannelLinear(configs.enc_in, L, P)
        else:
            self.seasonal, self.trend = nn.Linear(L, P), nn.Linear(L, P)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        seasonal, trend = self.decomposition(x.transpose(1, 2))
        return (self.seasonal(seasonal) + self.trend(trend)).transpose(1, 2)
