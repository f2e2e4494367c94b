from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, hparam
from models.layers.linear import ChannelLinear
from models.layers.outputs import channels_last, split_points


class Model(nn.Module):
    """NLinear: one linear layer over time applied to the window minus its last value, which is added back.

    Zeng, Chen, Zhang, Xu. "Are Transformers Effective for Time Series Forecasting?" AAAI 2023.
    https://arxiv.org/abs/2205.13504 (official code: cure-lab/LTSF-Linear, models/NLinear.py)

    Subtracting the last observed value of each channel is the paper's simple normalisation against
    distribution shift between training and test windows. As in the official code the layer is shared by all
    channels, or one per channel with `individual` (here one batched einsum instead of a list of nn.Linear,
    with the same initialisation).
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=False,  # channel-independent
                                multi_output=True)

    @dataclass
    class Config:
        individual: bool = hparam(False, "one linear layer per channel")

    def __init__(self, configs):
        super().__init__()
        L, P = configs.seq_len, configs.output_token_len * configs.n_outputs
        self.n_outputs = configs.n_outputs
        self.linear = ChannelLinear(configs.enc_in, L, P) if configs.individual else nn.Linear(L, P)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        last = x[:, -1:, :]  # (B, 1, C); the input carries no gradient, so the official detach() changes nothing
        out = channels_last(split_points(self.linear((x - last).transpose(1, 2)), self.n_outputs))
        return out + (last[..., None] if self.n_outputs > 1 else last)  # the last value added to each of the k
