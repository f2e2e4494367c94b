from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, activation, d_ff, dropout, e_layers, hparam, revin
from models.layers.dropout import Dropout
from models.layers.linear import dense
from models.layers.normalization import RevIN
from models.layers.outputs import channels_last, split_points


class WindowNorm(nn.Module):
    """Keras BatchNormalization / LayerNormalization over axis=[-2, -1] of (B, L, C): one scale and shift per
    (time, channel) element; batch statistics per element, or layer statistics over the whole window."""

    def __init__(self, kind: str, seq_len: int, channels: int):
        super().__init__()
        # Keras defaults: epsilon 1e-3, batch-norm moving averages kept at 0.99 (torch momentum 0.01)
        self.norm = (nn.BatchNorm1d(seq_len * channels, eps=1e-3, momentum=0.01) if kind == "batch"
                     else nn.LayerNorm((seq_len, channels), eps=1e-3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if isinstance(self.norm, nn.LayerNorm):
            return self.norm(x)
        return self.norm(x.flatten(1)).view_as(x)


class MixerBlock(nn.Module):
    """Time mixing (one dense layer over time, shared by the channels) and feature mixing (a two-layer MLP
    over channels, shared by the time steps), each normalised before and added back to its input."""

    def __init__(self, seq_len: int, channels: int, d_ff: int, dropout: float, activation: str, norm_type: str):
        super().__init__()
        self.act = getattr(F, activation)
        self.time_norm = WindowNorm(norm_type, seq_len, channels)
        self.time = dense(seq_len, seq_len)
        self.feature_norm = WindowNorm(norm_type, seq_len, channels)
        self.fc1, self.fc2 = dense(channels, d_ff), dense(d_ff, channels)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, C)
        h = self.act(self.time(self.time_norm(x).transpose(1, 2))).transpose(1, 2)
        x = x + self.dropout(h)
        h = self.dropout(self.act(self.fc1(self.feature_norm(x))))
        return x + self.dropout(self.fc2(h))


class Model(nn.Module):
    """TSMixer: stacked MLPs that alternately mix along time and across channels, then a linear map over time.

    Chen, Li, Arik, Yoder, Pfister. "TSMixer: An All-MLP Architecture for Time Series Forecasting." TMLR 2023.
    https://arxiv.org/abs/2303.06053 (official code: google-research/google-research,
    tsmixer/tsmixer_basic/models/tsmixer_rev_in.py and tsmixer.py, TensorFlow)

    The window is normalised by RevIN with learnable affine (revin: the official tsmixer_rev_in; off: the
    official tsmixer), passed through e_layers mixer blocks and projected from seq_len to the horizon by one
    dense layer over time shared by the channels. Each block: [norm, dense over time + activation, dropout]
    + residual, then [norm, dense over channels to d_ff + activation, dropout, dense back to the channels,
    dropout] + residual; norm_type "batch" is BatchNorm and "layer" LayerNorm over the whole (seq_len,
    channels) window, as the official axis=[-2, -1]. Layers start as Keras's (Glorot-uniform weights, zero
    biases). Defaults are the official run.py's (the paper's ETTh1 tuning is in its appendix).

    Deviations from the official code: RevIN's statistics add eps 1e-5 inside the square root and its
    inverse divides by weight + 1e-7 (models.layers.normalization.RevIN); in covariate mode every
    channel is projected to the horizon and the framework scores the target, where the official code slices
    the target channel out before the projection (the same target forecast).
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=True, multi_output=True)  # mixes channels

    @dataclass
    class Config:
        e_layers: int = e_layers(2)
        d_ff: int = d_ff(2048)
        dropout: float = dropout(0.05)
        activation: str = activation("relu")
        norm_type: str = hparam("batch", "normalisation of the mixer blocks over each (time, channel) element",
                                choices=("batch", "layer"))
        revin: bool = revin()

    def __init__(self, configs):
        super().__init__()
        L, C, self.n_outputs = configs.seq_len, configs.enc_in, configs.n_outputs
        self.revin = RevIN(C, inverse_eps=1e-7) if configs.revin else None
        self.blocks = nn.Sequential(*(MixerBlock(L, C, configs.d_ff, configs.dropout, configs.activation,
                                                 configs.norm_type) for _ in range(configs.e_layers)))
        self.projection = dense(L, configs.output_token_len * self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.revin is not None:
            x, stats = self.revin.normalize(x)
        out = channels_last(split_points(self.projection(self.blocks(x).transpose(1, 2)), self.n_outputs))
        return self.revin.denormalize(out, stats) if self.revin is not None else out
