from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, activation, d_ff, d_model, dropout, e_layers, hparam, n_heads, use_norm
from models.layers.dropout import Dropout
from models.layers.embed import sinusoidal_positions
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points
from models.layers.transformer import EncoderLayer, MultiHeadAttention


class CrossAttention(MultiHeadAttention):
    """Multi-head attention of query tokens over other (memory) tokens, with MultiHeadAttention's parameters:
    the first third of its fused projection makes the queries, the other two the keys and values."""

    def forward(self, query: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        B, S, D = query.shape
        heads, width = self.n_heads, D // self.n_heads
        q = F.linear(query, self.qkv.weight[:D], self.qkv.bias[:D]).view(B, S, heads, width).transpose(1, 2)
        k, v = (F.linear(memory, self.qkv.weight[D:], self.qkv.bias[D:])
                .view(B, memory.shape[1], 2, heads, width).permute(2, 0, 3, 1, 4))
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        return self.out(out.transpose(1, 2).reshape(B, S, D))


class TimeXerLayer(EncoderLayer):
    """TimeXer's encoder layer: self-attention over each series' patch tokens and its global token, then the
    global token alone attends to the variate tokens (cross-attention), then the feed-forward block; each step
    is residual and followed by LayerNorm (post-norm), dropout on every branch and in both attentions."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, act: str):
        super().__init__(d_model, n_heads, d_ff, dropout, act)
        self.cross_attention = CrossAttention(d_model, n_heads, dropout)
        self.norm_cross = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, variates: torch.Tensor) -> torch.Tensor:
        # x: (B * V, N + 1, D), the N patch tokens then the global token of each of V series of B windows;
        # variates: (B, M, D)
        x = self.norm1(x + self.dropout(self.attention(x)))
        B, M, D = variates.shape
        glb = x[:, -1].view(B, -1, D)  # the V global tokens of a window query its variate tokens together
        if M:  # no variate tokens (a lone target without calendar features): nothing to attend to
            glb = glb + self.dropout(self.cross_attention(glb, variates))
        x = torch.cat([x[:, :-1], self.norm_cross(glb).view(-1, 1, D)], dim=1)
        return self.norm2(x + self.dropout(self.ffn(x)))


class Model(nn.Module):
    """TimeXer: patch tokens of the endogenous series, whose learnable global token attends to variate tokens
    of the exogenous series.

    Wang, Wu, Dong, Qin, Zhang, Liu, Qiu, Wang, Long. "TimeXer: Empowering Transformers for Time Series
    Forecasting with Exogenous Variables." NeurIPS 2024. https://arxiv.org/abs/2402.19072
    (official code: https://github.com/thuml/TimeXer, models/TimeXer.py, the same as Time-Series-Library's)

    Each window is normalised per channel (use_norm: RevIN without affine). An endogenous series is cut into
    non-overlapping patches of patch_len, each projected linearly (no bias) to d_model plus a sinusoidal
    position, followed by the series' learnable global token. Every series in the window, with each calendar
    feature as one more series, becomes one variate token by a linear map of its whole window (iTransformer's
    inverted embedding). In each layer the patch and global tokens of a series attend to each other, and the
    global token attends to the window's variate tokens (TimeXerLayer). After a final LayerNorm the tokens of
    a series are flattened and mapped linearly to the horizon (k values a point with n_outputs k), followed by
    dropout as the official head.
    Covariate mode (TSLib's features MS, the paper's forecasting with exogenous variables): the target (last
    channel) is the one endogenous series, the other channels and the calendar features are the variate
    tokens, and the forecast of the target alone is returned, de-normalised with its statistics. Otherwise
    (features M, the paper's multivariate setting): every channel is endogenous, its own patch tokens and
    global token (one per channel), the layers and head shared; the variate tokens are all the channels and
    the calendar features. Defaults are TSLib's run.py (its scripts set d_model, d_ff, e_layers per task).

    Deviations from the official code:
    - When seq_len is not a multiple of patch_len, the patches cover the latest points of the window and the
      oldest remainder is left out; the official unfold leaves out the latest ones.
    - With no variate tokens (one channel in covariate mode and no calendar features) the cross-attention is
      skipped; the official attention over nothing would add its output projection's bias.
    - The head flattens the tokens token-major (the official code flattens d_model-major): the same map with
      its weight's columns permuted.
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=True, time_marks=True, exogenous=True,
                                multi_output=True)

    @dataclass
    class Config:
        patch_len: int = hparam(16, "points per patch", tiny=8, low=1)
        d_model: int = d_model()
        n_heads: int = n_heads()
        e_layers: int = e_layers(2)
        d_ff: int = d_ff()
        dropout: float = dropout()
        activation: str = activation("gelu")
        use_norm: bool = use_norm(True)

    def __init__(self, configs):
        super().__init__()
        L, P, D = configs.seq_len, configs.patch_len, configs.d_model
        if P > L:
            raise ValueError(f"patch_len {P} is longer than seq_len {L}")
        self.patch_len, self.n_patches = P, L // P
        self.covariate, self.use_norm, self.n_outputs = configs.covariate, configs.use_norm, configs.n_outputs
        self.patch_embedding = nn.Linear(P, D, bias=False)
        self.register_buffer("position", sinusoidal_positions(self.n_patches, D), persistent=False)
        self.global_token = nn.Parameter(torch.randn(1 if self.covariate else configs.enc_in, D))
        self.variate_embedding = nn.Linear(L, D)
        self.dropout = Dropout(configs.dropout)
        self.layers = nn.ModuleList(TimeXerLayer(D, configs.n_heads, configs.d_ff, configs.dropout,
                                                 configs.activation) for _ in range(configs.e_layers))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear((self.n_patches + 1) * D, configs.output_token_len * self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.use_norm:
            x, (mean, std) = normalize(x)
        endogenous = x[..., -1:] if self.covariate else x
        B, _, V = endogenous.shape
        # patches: (B, V, N, P) from the latest N * P points
        patches = endogenous[:, x.shape[1] - self.n_patches * self.patch_len:].transpose(1, 2).unfold(
            -1, self.patch_len, self.patch_len)
        tokens = self.patch_embedding(patches) + self.position
        tokens = torch.cat([tokens, self.global_token[:, None].expand(B, -1, -1, -1)], dim=2)
        h = self.dropout(tokens.flatten(0, 1))  # (B * V, N + 1, D)
        series = x[..., :-1] if self.covariate else x
        if x_mark is not None:
            series = torch.cat([series, x_mark], dim=-1)
        variates = self.dropout(self.variate_embedding(series.transpose(1, 2)))  # (B, M, D)
        for layer in self.layers:
            h = layer(h, variates)
        out = self.dropout(self.head(self.norm(h).flatten(1))).view(B, V, -1)
        out = channels_last(split_points(out, self.n_outputs))  # (B, horizon, V[, k])
        if not self.use_norm:
            return out
        return denormalize(out, (mean[..., -1:], std[..., -1:]) if self.covariate else (mean, std))
