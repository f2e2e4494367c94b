from dataclasses import dataclass
from math import ceil

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, d_ff, d_model, dropout, e_layers, hparam, n_heads
from models.layers.dropout import Dropout
from models.layers.embed import sinusoidal_positions
from models.layers.outputs import channels_last, split_points
from models.layers.transformer import MultiHeadAttention


class Attention(MultiHeadAttention):
    """MultiHeadAttention whose queries may come from another sequence (`memory`) than its keys and values:
    the rows of the fused projection are the official separate query, key and value projections.

    head_mixup: the official code before commit c10c8ea, which produced the paper's numbers, read the heads'
    (H, L, E) outputs as (L, H * E) without separating heads from positions, so each output row mixes them."""

    def __init__(self, d_model: int, n_heads: int, dropout: float, head_mixup: bool = False):
        super().__init__(d_model, n_heads, dropout)
        self.head_mixup = head_mixup

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        if memory is None and not self.head_mixup:
            return super().forward(x)
        memory = x if memory is None else memory
        (N, L, D), H = x.shape, self.n_heads
        q = F.linear(x, self.qkv.weight[:D], self.qkv.bias[:D]).view(N, L, H, -1).transpose(1, 2)
        k, v = F.linear(memory, self.qkv.weight[D:], self.qkv.bias[D:]).view(N, -1, 2, H, D // H).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        return self.out(out.reshape(N, L, D) if self.head_mixup else out.transpose(1, 2).reshape(N, L, D))


class Stage(nn.Module):
    """A post-norm residual pair: x = norm(x + dropout(mix(x, ...))); norm(x + dropout(MLP(x))), where the MLP
    (GELU, no inner dropout) is d_model -> d_hidden -> d_model and mlp_dropout its residual dropout."""

    def __init__(self, mix: nn.Module, d_model: int, d_hidden: int, dropout: float, mlp_dropout: float):
        super().__init__()
        self.mix = mix
        self.mlp = nn.Sequential(nn.Linear(d_model, d_hidden), nn.GELU(), nn.Linear(d_hidden, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout, self.mlp_dropout = Dropout(dropout), Dropout(mlp_dropout)

    def forward(self, x: torch.Tensor, *memory: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.mix(x, *memory)))
        return self.norm2(x + self.mlp_dropout(self.mlp(x)))


class RouterAttention(nn.Module):
    """Cross-dimension stage: per segment, `routers` learnable vectors gather from all D dimensions (sender)
    and each dimension reads them back (receiver): O(D) instead of O(D^2) attention."""

    def __init__(self, n_segments: int, routers: int, d_model: int, n_heads: int, dropout: float, head_mixup: bool):
        super().__init__()
        self.sender = Attention(d_model, n_heads, dropout, head_mixup)
        self.receiver = Attention(d_model, n_heads, dropout, head_mixup)
        self.router = nn.Parameter(torch.randn(n_segments, routers, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B*segments, D, d_model)
        routers = self.router.repeat(x.shape[0] // self.router.shape[0], 1, 1)
        return self.receiver(x, self.sender(routers, x))


class TwoStageAttention(nn.Module):
    """TSA layer on (B, D, segments, d_model): attention across time within each dimension, then across
    dimensions through routers within each segment."""

    def __init__(self, configs, n_segments: int):
        super().__init__()
        d, p, mixup = configs.d_model, configs.dropout, configs.head_mixup
        self.time = Stage(Attention(d, configs.n_heads, p, mixup), d, configs.d_ff, p, p)
        self.dims = Stage(RouterAttention(n_segments, configs.router_factor, d, configs.n_heads, p, mixup),
                          d, configs.d_ff, p, p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, D, S, M = x.shape
        x = self.time(x.reshape(B * D, S, M))
        x = self.dims(x.view(B, D, S, M).transpose(1, 2).reshape(B * S, D, M))
        return x.view(B, S, D, M).transpose(1, 2)


class SegmentMerging(nn.Module):
    """Concatenates every win_size adjacent segments (the last ones repeated to fill the final window), then
    LayerNorm and a linear map back to d_model: a coarser scale with win_size times fewer segments."""

    def __init__(self, d_model: int, win_size: int):
        super().__init__()
        self.win_size = win_size
        self.norm = nn.LayerNorm(win_size * d_model)
        self.linear = nn.Linear(win_size * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, D, S, M = x.shape
        short = -S % self.win_size
        if short:
            x = torch.cat([x, x[:, :, S - short:]], dim=2)
        return self.linear(self.norm(x.reshape(B, D, -1, self.win_size * M)))


class DecoderLayer(nn.Module):
    """TSA on the decoder's segments, attention of each dimension's segments to the encoder's output at one
    scale, and a linear map of every segment to seg_len points (of k values each): this scale's forecast."""

    def __init__(self, configs, n_segments: int):
        super().__init__()
        d, p = configs.d_model, configs.dropout
        self.tsa = TwoStageAttention(configs, n_segments)
        # official: no dropout on this MLP
        self.cross = Stage(Attention(d, configs.n_heads, p, configs.head_mixup), d, d, p, 0.0)
        self.predict = nn.Linear(d, configs.seg_len * configs.n_outputs)
        self.n_outputs = configs.n_outputs

    def forward(self, x: torch.Tensor, encoded: torch.Tensor):
        B, D, S, M = x.shape
        x = self.cross(self.tsa(x).reshape(B * D, S, M), encoded.flatten(0, 1)).view(B, D, S, M)
        return x, split_points(self.predict(x), self.n_outputs)


class Model(nn.Module):
    """Crossformer: two-stage (cross-time, cross-dimension) attention over segment embeddings, hierarchical.

    Zhang, Yan. "Crossformer: Transformer Utilizing Cross-Dimension Dependency for Multivariate Time Series
    Forecasting." ICLR 2023. https://openreview.net/forum?id=vSVLM2j9eie
    Official code: https://github.com/Thinklab-SJTU/Crossformer

    The window is padded at the front (its first value repeated) to a multiple of seg_len and every dimension
    cut into segments, each embedded linearly plus a learnable position embedding (DSW embedding). The encoder
    applies e_layers TSA blocks, all but the first after merging win_size adjacent segments. Decoder layer i
    (e_layers + 1 of them, starting from a learnable embedding of the horizon's segments) attends to the
    encoder's i-th scale (i = 0: the embedding) and predicts seg_len points per segment; the forecast is the sum
    over layers, cut to its first output_token_len points (plus the window mean with `baseline`).

    Follows the official code at its latest commit (c10c8ea, Dec 2023), which removed a transpose that mixed
    heads and positions in every attention output; the paper's numbers were produced before that fix, and
    `head_mixup` restores it. TSLib's port (behind the lookback-96 numbers of later papers) embeds segments
    without a bias and adds a fixed sine/cosine table to the learnable positions: `tslib_embedding`.
    Deviations: attention is F.scaled_dot_product_attention with one fused query/key/value projection (the
    official three projections stacked; equal outputs); Dropout is models.layers.dropout.Dropout (other
    random masks on CPU).
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=True, time_marks=False,
                                multi_output=True)

    @dataclass
    class Config:
        seg_len: int = hparam(6, "points per segment (crossformer pads the window and the horizon to a multiple "
                                 "of it; segrnn needs seq_len and the horizon to be multiples of it)",
                              tiny=6, low=1)
        win_size: int = hparam(2, "adjacent segments merged into one between encoder scales", low=1)
        router_factor: int = hparam(10, "routers per segment in the cross-dimension stage (TSLib: --factor)",
                                    tiny=2, low=1)
        d_model: int = d_model(256)
        d_ff: int = d_ff(512)
        n_heads: int = n_heads(4)
        e_layers: int = e_layers(3)
        dropout: float = dropout(0.2)
        baseline: bool = hparam(False, "add the window's mean to the forecast", tiny=True)
        head_mixup: bool = hparam(False, "every attention's heads merged as the official code before c10c8ea (which "
                                         "made the paper's numbers) did: without separating heads from positions",
                                  later=True)
        tslib_embedding: bool = hparam(False, "TSLib's segment embedding: no bias, and a fixed sine/cosine table "
                                              "added to the learnable position embedding (the port behind the "
                                              "published lookback-96 numbers)", later=True)

    def __init__(self, configs):
        super().__init__()
        seg, win, d = configs.seg_len, configs.win_size, configs.d_model
        self.seg_len, self.horizon, self.baseline = seg, configs.output_token_len, configs.baseline
        self.n_outputs = configs.n_outputs
        in_segments = ceil(configs.seq_len / seg)
        self.front_pad = in_segments * seg - configs.seq_len
        out_segments = ceil(self.horizon / seg)
        C = configs.enc_in
        self.embed = nn.Linear(seg, d, bias=not configs.tslib_embedding)
        self.enc_position = nn.Parameter(torch.randn(1, C, in_segments, d))
        # Not a reparametrisation in practice: Adam moves the learnable table by about lr a step, so the fixed
        # table stays in the embedding throughout training.
        fixed = sinusoidal_positions(in_segments, d) if configs.tslib_embedding else torch.zeros(in_segments, d)
        self.register_buffer("enc_fixed_position", fixed, persistent=False)
        self.pre_norm = nn.LayerNorm(d)
        self.merges = nn.ModuleList(SegmentMerging(d, win) if i and win > 1 else nn.Identity()
                                    for i in range(configs.e_layers))
        self.encoder = nn.ModuleList(TwoStageAttention(configs, ceil(in_segments / win ** i))
                                     for i in range(configs.e_layers))
        self.dec_position = nn.Parameter(torch.randn(1, C, out_segments, d))
        self.decoder = nn.ModuleList(DecoderLayer(configs, out_segments) for _ in range(configs.e_layers + 1))

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        B, _, C = x.shape
        base = x.mean(1, keepdim=True) if self.baseline else 0.0
        if self.baseline and self.n_outputs > 1:
            base = base[..., None]  # the same mean under each of the k values
        if self.front_pad:
            x = torch.cat([x[:, :1].expand(-1, self.front_pad, -1), x], dim=1)
        h = x.transpose(1, 2).unflatten(-1, (-1, self.seg_len))  # (B, C, segments, seg_len)
        # the fixed table joins the (C, segments, d) positions, not the batch: the default adds zeros to a small tensor
        h = self.pre_norm(self.embed(h) + (self.enc_position + self.enc_fixed_position))
        scales = [h]
        for merge, block in zip(self.merges, self.encoder):
            h = block(merge(h))
            scales.append(h)
        y, forecast = self.dec_position.expand(B, -1, -1, -1), 0.0
        for layer, encoded in zip(self.decoder, scales):
            y, predicted = layer(y, encoded)
            forecast = forecast + predicted  # (B, C, out segments, seg_len[, k])
        return base + channels_last(forecast.flatten(2, 3))[:, :self.horizon]
