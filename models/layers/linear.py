"""Linear maps that several models share."""
import math

import torch
from torch import nn


class ChannelLinear(nn.Module):
    """A Linear(in, out) per channel (the `individual` mode of DLinear, NLinear, RLinear) as one batched einsum."""

    def __init__(self, channels: int, in_features: int, out_features: int):
        super().__init__()
        bound = 1 / math.sqrt(in_features)  # nn.Linear's default initialisation
        self.weight = nn.Parameter(torch.empty(channels, out_features, in_features).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(channels, out_features).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, in) -> (B, C, out)
        return torch.einsum("bci,coi->bco", x, self.weight) + self.bias


def dense(in_features: int, out_features: int) -> nn.Linear:
    """nn.Linear initialised as a Keras Dense layer (Glorot-uniform weight, zero bias), as the official
    TensorFlow codes (TSMixer, TiDE) build their layers."""
    layer = nn.Linear(in_features, out_features)
    nn.init.xavier_uniform_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer
