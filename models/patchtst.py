from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, activation, d_ff, d_model, dropout, e_layers, hparam, n_heads, use_norm
from models.layers.dropout import Dropout
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points
from models.layers.transformer import encoder_layers


class Model(nn.Module):
    """PatchTST: channel-independent Transformer over overlapping patches, with a flatten-linear head.

    Nie, Nguyen, Sinthong, Kalagnanam. "A Time Series is Worth 64 Words: Long-term Forecasting with
    Transformers." ICLR 2023. https://arxiv.org/abs/2211.14730

    Every channel is its own sequence: the input (normalised per window, RevIN without affine when
    use_norm) is padded at the end by `stride` repeats of its last value and cut into patches of
    patch_len every stride points (PatchTST/42: L=336, P=16, S=8 -> 42 patches). Patches are projected
    to d_model, given a learnable position embedding, encoded by post-norm Transformer layers with
    BatchNorm, flattened and mapped linearly to the forecast. The official code's residual attention
    (scores carried across layers) is not used: attention is F.scaled_dot_product_attention.
    """
    capabilities = Capabilities(direct=True, covariate=False, multi_output=True)  # channel-independent

    @dataclass
    class Config:
        patch_len: int = hparam(16, "points per patch", tiny=8, low=1)
        stride: int = hparam(8, "distance between patch starts", tiny=4, low=1)
        d_model: int = d_model()
        n_heads: int = n_heads()
        e_layers: int = e_layers()
        d_ff: int = d_ff()
        dropout: float = dropout()
        head_dropout: float = hparam(0.0, "dropout before the forecast head", low=0.0, high=1.0)
        activation: str = activation()
        use_norm: bool = use_norm()

    def __init__(self, configs):
        super().__init__()
        self.patch_len, self.stride = configs.patch_len, configs.stride
        # the window is padded by one stride at its end (as the official code): a patch longer than the window
        # fits while it fits the padded one (TSLib's PatchTST on M4 Yearly: 12 points, patches of 16, stride 8)
        if self.patch_len > configs.seq_len + self.stride:
            raise ValueError(f"patch_len {self.patch_len} is longer than seq_len {configs.seq_len} plus the stride "
                             f"{self.stride} of the end padding")
        n_patches = (configs.seq_len - self.patch_len) // self.stride + 2  # +1 for the end padding
        self.use_norm, self.n_outputs = configs.use_norm, configs.n_outputs
        self.projection = nn.Linear(self.patch_len, configs.d_model)
        self.position = nn.Parameter(torch.empty(n_patches, configs.d_model).uniform_(-0.02, 0.02))
        self.dropout = Dropout(configs.dropout)
        self.layers = encoder_layers(configs, attn_dropout=0.0, norm="batch")
        self.head = nn.Sequential(nn.Flatten(start_dim=-2), Dropout(configs.head_dropout),
                                  nn.Linear(n_patches * configs.d_model, configs.output_token_len * self.n_outputs))

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.use_norm:
            x, stats = normalize(x)
        B, _, C = x.shape
        series = F.pad(x.transpose(1, 2), (0, self.stride), mode="replicate")  # (B, C, L + S)
        patches = series.unfold(-1, self.patch_len, self.stride)  # (B, C, N, P)
        h = self.dropout(self.projection(patches).flatten(0, 1) + self.position)  # (B*C, N, D)
        for layer in self.layers:
            h = layer(h)
        out = channels_last(split_points(self.head(h).reshape(B, C, -1), self.n_outputs))
        return denormalize(out, stats) if self.use_norm else out
