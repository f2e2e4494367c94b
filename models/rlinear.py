from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, dropout, hparam
from models.layers.dropout import Dropout
from models.layers.linear import ChannelLinear
from models.layers.normalization import RevIN
from models.layers.outputs import channels_last, split_points


class Model(nn.Module):
    """RLinear: a single linear layer over time between RevIN's normalisation and its inverse.

    Li, Qi, Li, Xu. "Revisiting Long-term Time Series Forecasting: An Investigation on Linear Mapping."
    arXiv 2023. https://arxiv.org/abs/2305.10721 (official code: plumprc/RTSF, models/RLinear.py)

    Each window is standardised per channel, scaled and shifted by RevIN's learnable per-channel affine
    parameters, dropped out, mapped to the horizon by one linear layer shared by all channels (or one per
    channel with `individual`), and mapped back by the inverse affine and the window's statistics.
    Deviations from the official code: RevIN is always on (the official `--rev` switch, which every official
    script sets; without it the model is a plain Linear); `individual` is one batched einsum instead of a list
    of nn.Linear, with the same initialisation; the window statistics are not detached (the input carries no
    gradient, so this changes nothing).
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=False,  # channel-independent
                                multi_output=True)

    @dataclass
    class Config:
        individual: bool = hparam(False, "one linear layer per channel")
        dropout: float = dropout()

    def __init__(self, configs):
        super().__init__()
        L, P, C = configs.seq_len, configs.output_token_len * configs.n_outputs, configs.enc_in
        self.n_outputs = configs.n_outputs
        self.revin = RevIN(C, inverse_eps=1e-10)  # the official RLinear's eps^2
        self.dropout = Dropout(configs.dropout)
        self.linear = ChannelLinear(C, L, P) if configs.individual else nn.Linear(L, P)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        x, stats = self.revin.normalize(x)
        out = channels_last(split_points(self.linear(self.dropout(x).transpose(1, 2)), self.n_outputs))
        return self.revin.denormalize(out, stats)
