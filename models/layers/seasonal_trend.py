"""The seasonal-trend decomposition encoder-decoder of Autoformer and FEDformer.

Autoformer (Wu et al., NeurIPS 2021, https://arxiv.org/abs/2106.13008, github.com/thuml/Autoformer) and FEDformer
(Zhou et al., ICML 2022, https://arxiv.org/abs/2201.12740, github.com/MAZiqing/FEDformer) share everything but the
mechanism that mixes time steps (Auto-Correlation; Fourier blocks): each layer's output is the seasonal part of a
moving-average decomposition, the decoder accumulates the trends it removes, and the forecast is the decoder's
seasonal output plus that trend. The mechanism comes from the model file as a module that takes per-head queries,
keys and values (batch, time, heads, head width) and returns (batch, query time, d_model).

With n_outputs k > 1 (models/base.py) the seasonal projection and every decoder layer's trend projection give k
values per point: each of the k is a forecast of its own (its seasonal part plus its own accumulated trend), all
starting from the same trend of the window.
"""
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from models.base import activation, d_ff, d_model, dropout, e_layers, hparam, label_len, n_heads
from models.layers.decomposition import SeriesDecomposition
from models.layers.dropout import Dropout
from models.layers.embed import DataEmbedding
from models.layers.outputs import split_points
from models.layers.transformer import activation as activation_module


@dataclass
class DecompositionConfig:
    """The hyper-parameters Autoformer and FEDformer share; defaults from their official run.py."""
    d_model: int = d_model(512)
    n_heads: int = n_heads(8)
    e_layers: int = e_layers(2)
    d_layers: int = hparam(1, "number of decoder layers", tiny=1, low=1)
    d_ff: int = d_ff(2048)
    dropout: float = dropout(0.05)
    activation: str = activation("gelu")
    moving_avg: int = hparam(25, "moving-average kernel of the series decomposition", tiny=5, low=1)
    label_len: int = label_len(48)


class TimeDecomposition(nn.Module):
    """SeriesDecomposition along the time axis of (batch, time, features): (seasonal, trend)."""

    def __init__(self, kernel_size: int):
        super().__init__()
        self.decomposition = SeriesDecomposition(kernel_size)

    def forward(self, x: torch.Tensor):
        seasonal, trend = self.decomposition(x.transpose(1, 2))
        return seasonal.transpose(1, 2), trend.transpose(1, 2)


class SeasonalLayerNorm(nn.Module):
    """LayerNorm over features, then the mean over time removed (the official my_Layernorm): the output stays a
    seasonal part."""

    def __init__(self, d_model: int):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        return x - x.mean(dim=1, keepdim=True)


class HeadMixing(nn.Module):
    """The official AutoCorrelationLayer: queries, keys and values projected into n_heads heads, mixed along time
    by `mechanism`, projected back. A projection the mechanism does not read (FEDformer's Fourier blocks ignore
    keys and/or values) is left out, so DDP sees no parameter without gradient."""

    def __init__(self, mechanism: nn.Module, d_model: int, n_heads: int, keys: bool = True, values: bool = True):
        super().__init__()
        self.mechanism, self.n_heads = mechanism, n_heads
        width = d_model // n_heads * n_heads  # heads of d_model // n_heads, as the official layer
        self.query = nn.Linear(d_model, width)
        self.key = nn.Linear(d_model, width) if keys else None
        self.value = nn.Linear(d_model, width) if values else None
        self.out = nn.Linear(width, d_model)

    def _heads(self, projection, x: torch.Tensor):
        return None if projection is None else projection(x).unflatten(-1, (self.n_heads, -1))

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        mixed = self.mechanism(self._heads(self.query, queries), self._heads(self.key, keys),
                               self._heads(self.value, values))
        return self.out(mixed)


def feed_forward(d_model: int, d_ff: int, dropout: float, act: str) -> nn.Sequential:
    """The official pair of bias-free width-1 convolutions (here linear layers), each followed by dropout."""
    return nn.Sequential(nn.Linear(d_model, d_ff, bias=False), activation_module(act), Dropout(dropout),
                         nn.Linear(d_ff, d_model, bias=False), Dropout(dropout))


class EncoderLayer(nn.Module):
    """x + mixing -> seasonal part -> + feed-forward -> seasonal part (the trends are dropped)."""

    def __init__(self, mixing: nn.Module, configs):
        super().__init__()
        self.mixing = mixing
        self.ffn = feed_forward(configs.d_model, configs.d_ff, configs.dropout, configs.activation)
        self.decomposition1 = TimeDecomposition(configs.moving_avg)
        self.decomposition2 = TimeDecomposition(configs.moving_avg)
        self.dropout = Dropout(configs.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, _ = self.decomposition1(x + self.dropout(self.mixing(x, x, x)))
        x, _ = self.decomposition2(x + self.ffn(x))
        return x


class DecoderLayer(nn.Module):
    """Self-mixing, cross-mixing with the encoder output and feed-forward, each followed by a decomposition;
    the three trends removed are summed and projected to the output channels (width-3 circular convolution)."""

    def __init__(self, self_mixing: nn.Module, cross_mixing: nn.Module, configs, channels: int):
        super().__init__()
        self.self_mixing, self.cross_mixing = self_mixing, cross_mixing
        self.ffn = feed_forward(configs.d_model, configs.d_ff, configs.dropout, configs.activation)
        self.decompositions = nn.ModuleList(TimeDecomposition(configs.moving_avg) for _ in range(3))
        self.dropout = Dropout(configs.dropout)
        self.trend_projection = nn.Conv1d(configs.d_model, channels, kernel_size=3, padding=1,
                                          padding_mode="circular", bias=False)

    def forward(self, x: torch.Tensor, cross: torch.Tensor):
        x, trend1 = self.decompositions[0](x + self.dropout(self.self_mixing(x, x, x)))
        x, trend2 = self.decompositions[1](x + self.dropout(self.cross_mixing(x, cross, cross)))
        x, trend3 = self.decompositions[2](x + self.ffn(x))
        trend = self.trend_projection((trend1 + trend2 + trend3).transpose(1, 2)).transpose(1, 2)
        return x, trend


class DecompositionTransformer(nn.Module):
    """Embeddings (value + calendar features, no positions), encoder and decoder of Autoformer / FEDformer, and
    the decoder input built from the window; (batch, horizon, channels), or (..., channels, k) with n_outputs k.

    The decoder input covers the last label_len points of the window and the horizon: its seasonal part is the
    window's seasonal part there, zeros on the horizon; its trend starts as the window's trend there and the
    window's mean on the horizon, and each decoder layer adds the trend it extracts. Calendar features
    (x_mark, window + horizon) go to both embeddings; without them (n_marks 0) the embeddings are values only.

    encoder_mixing(), decoder_self_mixing() and decoder_cross_mixing() return one layer's HeadMixing each.
    """

    def __init__(self, configs, encoder_mixing: Callable[[], nn.Module], decoder_self_mixing: Callable[[], nn.Module],
                 decoder_cross_mixing: Callable[[], nn.Module]):
        super().__init__()
        self.seq_len, self.label_len, self.horizon = configs.seq_len, configs.label_len, configs.output_token_len
        if self.label_len > self.seq_len:
            raise ValueError(f"label_len {self.label_len} exceeds seq_len {self.seq_len}")
        C, D, self.n_outputs = configs.enc_in, configs.d_model, configs.n_outputs
        self.decomposition = TimeDecomposition(configs.moving_avg)
        self.encoder_embedding = DataEmbedding(C, D, configs.n_marks, configs.dropout, position=False)
        self.decoder_embedding = DataEmbedding(C, D, configs.n_marks, configs.dropout, position=False)
        self.encoder = nn.ModuleList(EncoderLayer(encoder_mixing(), configs) for _ in range(configs.e_layers))
        self.encoder_norm = SeasonalLayerNorm(D)
        self.decoder = nn.ModuleList(DecoderLayer(decoder_self_mixing(), decoder_cross_mixing(), configs,
                                                  C * self.n_outputs) for _ in range(configs.d_layers))
        self.decoder_norm = SeasonalLayerNorm(D)
        self.projection = nn.Linear(D, C * self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        L, S, P = self.seq_len, self.label_len, self.horizon
        seasonal, trend = self.decomposition(x)
        trend = torch.cat([trend[:, L - S:], x.mean(dim=1, keepdim=True).expand(-1, P, -1)], dim=1)
        seasonal = F.pad(seasonal[:, L - S:], (0, 0, 0, P))
        if self.n_outputs > 1:
            trend = trend[..., None]  # the window's trend, the same under each of the k
        encoder_marks = decoder_marks = None
        if x_mark is not None:
            encoder_marks, decoder_marks = x_mark[:, :L], x_mark[:, L - S:L + P]
        h = self.encoder_embedding(x, encoder_marks)
        for layer in self.encoder:
            h = layer(h)
        h = self.encoder_norm(h)
        out = self.decoder_embedding(seasonal, decoder_marks)
        for layer in self.decoder:
            out, layer_trend = layer(out, h)
            trend = trend + split_points(layer_trend, self.n_outputs)
        return (split_points(self.projection(self.decoder_norm(out)), self.n_outputs) + trend)[:, -P:]
