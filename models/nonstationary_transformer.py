from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, activation, d_ff, d_model, dropout, e_layers, hparam, label_len, n_heads
from models.layers.embed import DataEmbedding
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import split_points
from models.layers.transformer import EncoderLayer

TAU_LOG_MAX = 80.0  # log tau is clamped here before exp (TSLib's threshold): exp(80) is still finite in float32


def widths(text: str) -> list[int]:
    """--p_hidden_dims: comma-separated positive integers."""
    try:
        found = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"p_hidden_dims must be comma-separated integers, got {text!r}") from None
    if not found or min(found) < 1:
        raise ValueError(f"p_hidden_dims must be positive integers, got {text!r}")
    return found


class Projector(nn.Module):
    """An MLP from the raw window and one of its statistics to a de-stationary factor: a width-3 circular
    convolution over the channels with the window's time steps as input channels (one value per channel), joined
    with the statistic (one per channel), then Linear-ReLU layers and a bias-free linear output."""

    def __init__(self, channels: int, seq_len: int, hidden: list[int], out: int):
        super().__init__()
        self.series_conv = nn.Conv1d(seq_len, 1, kernel_size=3, bias=False)
        layers, width = [], 2 * channels
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.mlp = nn.Sequential(*layers, nn.Linear(width, out, bias=False))

    def forward(self, x: torch.Tensor, stat: torch.Tensor) -> torch.Tensor:  # (B, L, C), (B, 1, C) -> (B, out)
        summary = self.series_conv(F.pad(x, (1, 1), mode="circular"))  # (B, 1, C)
        return self.mlp(torch.cat([summary, stat], dim=1).flatten(1))


class DestationaryAttention(nn.Module):
    """Multi-head De-stationary Attention: softmax((tau Q K^T + 1 delta^T) / sqrt(E)) V, with tau (B, 1) > 0 the
    learned scale of the raw series' scores and delta (B, S) the learned shift per key (None: no shift, as in the
    decoder's self-attention). tau scales the queries and delta / sqrt(E) is an additive mask, so that the product
    is one F.scaled_dot_product_attention; attention weights are dropped out as TSLib's."""

    def __init__(self, d_model: int, n_heads: int, dropout: float, causal: bool):
        super().__init__()
        self.n_heads, self.dropout, self.causal = n_heads, dropout, causal
        width = d_model // n_heads * n_heads
        self.query, self.key, self.value = (nn.Linear(d_model, width) for _ in range(3))
        self.out = nn.Linear(width, d_model)

    def forward(self, queries, keys, values, tau: torch.Tensor, delta: torch.Tensor | None) -> torch.Tensor:
        B, L, _ = queries.shape
        q, k, v = (projection(x).unflatten(-1, (self.n_heads, -1)).transpose(1, 2)
                   for projection, x in ((self.query, queries), (self.key, keys), (self.value, values)))
        shift = None if delta is None else delta[:, None, None, :] * q.shape[-1] ** -0.5
        out = F.scaled_dot_product_attention(q * tau[:, :, None, None], k, v, attn_mask=shift, is_causal=self.causal,
                                             dropout_p=self.dropout if self.training else 0.0)
        return self.out(out.transpose(1, 2).reshape(B, L, -1))


class Layer(EncoderLayer):
    """The shared post-norm layer (feed-forward, LayerNorms, dropout) with De-stationary Attention in place of its
    attention; in the decoder, causal self-attention without delta, then a cross-attention sublayer (with its
    LayerNorm) to the encoder output with tau and delta."""

    def __init__(self, configs, decoder: bool = False):
        super().__init__(configs.d_model, configs.n_heads, configs.d_ff, configs.dropout, configs.activation)
        self.attention = DestationaryAttention(configs.d_model, configs.n_heads, configs.dropout, causal=decoder)
        self.cross_attention = self.norm_cross = None
        if decoder:
            self.cross_attention = DestationaryAttention(configs.d_model, configs.n_heads, configs.dropout, False)
            self.norm_cross = nn.LayerNorm(configs.d_model)

    def forward(self, x: torch.Tensor, tau: torch.Tensor, delta: torch.Tensor,
                memory: torch.Tensor | None = None) -> torch.Tensor:
        if self.cross_attention is None:
            x = self.norm1(x + self.dropout(self.attention(x, x, x, tau, delta)))
        else:
            x = self.norm1(x + self.dropout(self.attention(x, x, x, tau, None)))
            x = self.norm_cross(x + self.dropout(self.cross_attention(x, memory, memory, tau, delta)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class Model(nn.Module):
    """Non-stationary Transformer: a vanilla encoder-decoder Transformer inside Series Stationarization, with
    De-stationary Attention.

    Liu, Wu, Wang, Long. "Non-stationary Transformers: Exploring the Stationarity in Time Series Forecasting."
    NeurIPS 2022. https://arxiv.org/abs/2205.14415 (official code: github.com/thuml/Nonstationary_Transformers,
    ns_models/ns_Transformer.py; the TSLib port: github.com/thuml/Time-Series-Library,
    models/Nonstationary_Transformer.py)

    Series Stationarization: each window is standardised per channel (mean, std over time), the network forecasts
    in that scale and the forecast gets the window's mean and std back. De-stationary Attention gives every
    attention back what standardisation removed: two Projectors (MLPs of p_hidden_layers ReLU layers of
    p_hidden_dims widths) read the raw window with its std (tau, through exp, one per window) and with its mean
    (delta, one per window and encoder step); every attention's pre-softmax scores become tau x scores + delta
    (delta left out in the decoder's causal self-attention, whose keys are not the window's steps). The encoder
    embeds the standardised window, the decoder its last label_len points followed by zeros for the horizon (value
    convolution + sinusoidal position + calendar features of those steps: x_mark covers window and horizon), and a
    linear projection of the decoder's last output_token_len steps is the forecast of every channel (k values a
    point with n_outputs k). Defaults are the official run.py's (dropout 0.05; TSLib's run.py has 0.1).

    Deviations from the official code (and TSLib's port):
    - log tau is clamped at 80 before exp, as TSLib does (the official code has no clamp, and overflows to inf
      beyond 88).
    - Attention is F.scaled_dot_product_attention on queries scaled by tau with delta / sqrt(E) as an additive mask:
      the same softmax(scale x (tau x scores + delta)) up to float rounding.
    - Calendar features are the framework's (timeF, the official default), embedded as TSLib's (no bias).
    - p_hidden_dims gives exactly one width per projector layer (the official code reads the first p_hidden_layers
      widths and the last, and fails unless the extra ones repeat the last width it used).
    - Not carried over: --factor (which De-stationary Attention never reads) and output_attention.
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=True, time_marks=True,
                                future_marks=True, multi_output=True)

    @dataclass
    class Config:
        d_model: int = d_model(512)
        n_heads: int = n_heads(8)
        e_layers: int = e_layers(2)
        d_layers: int = hparam(1, "number of decoder layers", tiny=1, low=1)
        d_ff: int = d_ff(2048)
        dropout: float = dropout(0.05)
        activation: str = activation("gelu")
        label_len: int = label_len(48)
        p_hidden_dims: str = hparam("128,128", "comma-separated hidden widths of the tau / delta projectors, one per "
                                               "layer (TSLib's --p_hidden_dims)", tiny="8,8")
        p_hidden_layers: int = hparam(2, "hidden layers of the tau / delta projectors (TSLib's --p_hidden_layers)",
                                      tiny=2, low=1)

    def __init__(self, configs):
        super().__init__()
        self.seq_len, self.label_len, self.horizon = configs.seq_len, configs.label_len, configs.output_token_len
        self.n_outputs = configs.n_outputs
        if self.label_len > self.seq_len:
            raise ValueError(f"label_len {self.label_len} exceeds seq_len {self.seq_len}")
        hidden = widths(configs.p_hidden_dims)
        if len(hidden) != configs.p_hidden_layers:
            raise ValueError(f"p_hidden_dims {configs.p_hidden_dims!r} must give one width for each of the "
                             f"p_hidden_layers {configs.p_hidden_layers}")
        C, D = configs.enc_in, configs.d_model
        self.encoder_embedding = DataEmbedding(C, D, configs.n_marks, configs.dropout)
        self.decoder_embedding = DataEmbedding(C, D, configs.n_marks, configs.dropout)
        self.encoder = nn.ModuleList(Layer(configs) for _ in range(configs.e_layers))
        self.encoder_norm = nn.LayerNorm(D)
        self.decoder = nn.ModuleList(Layer(configs, decoder=True) for _ in range(configs.d_layers))
        self.decoder_norm = nn.LayerNorm(D)
        self.projection = nn.Linear(D, C * self.n_outputs)
        self.tau_learner = Projector(C, self.seq_len, hidden, 1)
        self.delta_learner = Projector(C, self.seq_len, hidden, self.seq_len)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        L, S, P = self.seq_len, self.label_len, self.horizon
        raw = x
        x, stats = normalize(x)
        mean, std = stats
        tau = self.tau_learner(raw, std).clamp(max=TAU_LOG_MAX).exp()  # (B, 1)
        delta = self.delta_learner(raw, mean)  # (B, L)
        encoder_marks = decoder_marks = None
        if x_mark is not None:
            encoder_marks, decoder_marks = x_mark[:, :L], x_mark[:, L - S:L + P]
        h = self.encoder_embedding(x, encoder_marks)
        for layer in self.encoder:
            h = layer(h, tau, delta)
        h = self.encoder_norm(h)
        out = self.decoder_embedding(F.pad(x[:, L - S:], (0, 0, 0, P)), decoder_marks)
        for layer in self.decoder:
            out = layer(out, tau, delta, h)
        return denormalize(split_points(self.projection(self.decoder_norm(out[:, -P:])), self.n_outputs), stats)
