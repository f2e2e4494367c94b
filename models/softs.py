from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, Search, activation, d_ff, d_model, dropout, e_layers, hparam, use_norm
from models.layers.dropout import Dropout
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points
from models.layers.transformer import activation as make_activation


class STAR(nn.Module):
    """STar Aggregate-Redistribute: every series representation (B, N, D) proposes a core (an MLP to d_core),
    the proposals are pooled over the series into one core per window, and each series is fused with that core
    (concatenation, then an MLP back to D). Pooling is stochastic in training: per window and core feature, one
    series' value is drawn with probability softmax over the series (torch.multinomial, torch's generator); in
    eval it is the softmax-weighted mean, so eval draws nothing."""

    def __init__(self, d_series: int, d_core: int):
        super().__init__()
        self.propose = nn.Sequential(nn.Linear(d_series, d_series), nn.GELU(), nn.Linear(d_series, d_core))
        self.fuse = nn.Sequential(nn.Linear(d_series + d_core, d_series), nn.GELU(), nn.Linear(d_series, d_series))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, _ = x.shape
        proposals = self.propose(x)  # (B, N, d_core)
        weights = F.softmax(proposals, dim=1)  # over the series, per core feature
        if self.training:
            K = proposals.shape[2]
            drawn = torch.multinomial(weights.transpose(1, 2).reshape(B * K, N), 1).view(B, 1, K)
            core = proposals.gather(1, drawn)  # the gradient flows through the drawn series' proposal
        else:
            core = (proposals * weights).sum(1, keepdim=True)
        return self.fuse(torch.cat([x, core.expand(B, N, -1)], dim=-1))


class Layer(nn.Module):
    """A Transformer encoder layer with STAR in place of attention: post-norm, x = norm(x + STAR(x)), then
    norm(x + FFN(x)), dropout on both branches and inside the FFN."""

    def __init__(self, d_model: int, d_core: int, d_ff: int, dropout: float, act: str):
        super().__init__()
        self.star = STAR(d_model, d_core)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), make_activation(act), Dropout(dropout),
                                 nn.Linear(d_ff, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.star(x)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class Model(nn.Module):
    """SOFTS: the inverted embedding of iTransformer with attention replaced by STAR, a series-core fusion of
    linear cost in the number of series.

    Han, Chen, Ye, Zhan. "SOFTS: Efficient Multivariate Time Series Forecasting with Series-Core Fusion."
    NeurIPS 2024. https://arxiv.org/abs/2404.14197 (official code: github.com/Secilia-Cxy/SOFTS, models/SOFTS.py)

    Each variate's window of seq_len points is one token, embedded by one linear layer (calendar features, when
    present, are embedded the same way as extra tokens, which STAR pools with the variates). e_layers STAR layers
    mix the tokens, and a linear projection gives each variate's forecast; the calendar tokens are dropped. The
    input is standardised per window and channel (use_norm) and the forecast mapped back. Defaults are the official
    run.py's; there is no final LayerNorm, as in the official encoder.

    Deviations from the official code: the feed-forward blocks are nn.Linear where the official code has Conv1d of
    kernel 1 (the same map and initialisation); the window mean is not detached (the input carries no gradient, so
    this changes nothing). The official training loop leaves the calendar features out for PEMS and Solar; here
    that is the run's choice of data.
    """
    capabilities = Capabilities(direct=True, covariate=True, time_marks=True, multi_output=True)

    @dataclass
    class Config:
        d_model: int = d_model(512)
        d_core: int = hparam(512, "width of STAR's core, the representation pooled over the series", tiny=8, low=1,
                             search=Search(choices=(64, 128, 256, 512)))
        e_layers: int = e_layers(2)
        d_ff: int = d_ff(2048)
        dropout: float = dropout(0.0)
        activation: str = activation("gelu")
        use_norm: bool = use_norm(True)

    def __init__(self, configs):
        super().__init__()
        self.use_norm, self.n_outputs = configs.use_norm, configs.n_outputs
        self.embedding = nn.Sequential(nn.Linear(configs.seq_len, configs.d_model), Dropout(configs.dropout))
        self.layers = nn.ModuleList(Layer(configs.d_model, configs.d_core, configs.d_ff, configs.dropout,
                                          configs.activation) for _ in range(configs.e_layers))
        self.projection = nn.Linear(configs.d_model, configs.output_token_len * self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.use_norm:
            x, stats = normalize(x)
        C = x.shape[2]
        tokens = x if x_mark is None else torch.cat([x, x_mark], dim=2)
        h = self.embedding(tokens.transpose(1, 2))  # (B, C [+ F], D)
        for layer in self.layers:
            h = layer(h)
        out = channels_last(split_points(self.projection(h[:, :C]), self.n_outputs))  # calendar tokens dropped
        return denormalize(out, stats) if self.use_norm else out
