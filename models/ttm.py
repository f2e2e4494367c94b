from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, d_model, dropout, e_layers, hparam, use_norm
from models.layers.dropout import Dropout
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points


class AxisLinear(nn.Module):
    """A linear map along one axis of (B, C, N, D): features (-1), patches (-2) or channels (-3).

    One GEMM whatever the axis: einsum lays the other axes out as the rows of a single matrix,
    where a left multiplication would run B*C tiny batched GEMMs.
    """

    def __init__(self, size_in: int, size_out: int, axis: int):
        super().__init__()
        self.axis = axis
        layer = nn.Linear(size_in, size_out)  # nn.Linear's initialisation
        self.weight, self.bias = layer.weight, layer.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.axis == -1:
            return F.linear(x, self.weight, self.bias)
        if self.axis == -2:
            return torch.einsum("bcnd,hn->bchd", x, self.weight) + self.bias[:, None]
        return torch.einsum("bcnd,hc->bhnd", x, self.weight) + self.bias[:, None, None]


class GatedMLP(nn.Module):
    """LayerNorm, then an MLP along one axis with a softmax gate, plus the residual (TSMixer block)."""

    def __init__(self, d_model: int, size: int, axis: int, expansion: int, dropout: float):
        super().__init__()
        self.axis = axis  # -1 features, -2 patches, -3 channels of (B, C, N, D)
        self.norm = nn.LayerNorm(d_model)
        self.fc1 = AxisLinear(size, size * expansion, axis)
        self.fc2 = AxisLinear(size * expansion, size, axis)
        self.gate = AxisLinear(size, size, axis)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dropout(self.fc2(self.dropout(F.gelu(self.fc1(self.norm(x))))))
        return x + h * torch.softmax(self.gate(h), dim=self.axis)


class MixerLayer(nn.Module):
    """Optional channel mixing, then patch mixing and feature mixing."""

    def __init__(self, d_model: int, n_patches: int, n_vars: int, mix_channels: bool, expansion: int,
                 dropout: float):
        super().__init__()
        blocks = [GatedMLP(d_model, n_vars, -3, expansion, dropout)] if mix_channels else []
        if n_patches > 1:
            blocks.append(GatedMLP(d_model, n_patches, -2, expansion, dropout))
        blocks.append(GatedMLP(d_model, d_model, -1, expansion, dropout))
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class AdaptivePatchLevel(nn.Module):
    """Mixer layers on patches re-split by `factor`: N*factor patches of D/factor features each."""

    def __init__(self, factor: int, n_layers: int, d_model: int, n_patches: int, n_vars: int, expansion: int,
                 dropout: float):
        super().__init__()
        self.factor = factor
        self.layers = nn.Sequential(*(MixerLayer(d_model // factor, n_patches * factor, n_vars, False, expansion,
                                                 dropout) for _ in range(n_layers)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, N, D = x.shape
        return self.layers(x.reshape(B, C, N * self.factor, D // self.factor)).reshape(B, C, N, D)


class Model(nn.Module):
    """TTM (Tiny Time Mixers): a small MLP-Mixer with adaptive patching, trained from scratch here.

    Ekambaram, Jati, Dayama, Mukherjee, Nguyen, Gifford, Reddy, Kalagnanam. "Tiny Time Mixers (TTMs):
    Fast Pre-trained Models for Enhanced Zero/Few-Shot Forecasting of Multivariate Time Series."
    NeurIPS 2024. https://arxiv.org/abs/2401.03955

    Channel-independent backbone: non-overlapping patches of patch_len (the most recent seq_len
    points that fill whole patches), projected to d_model, through ap_levels levels of e_layers
    gated mixer layers; level i works on patches re-split by 2^i (coarse to fine, adaptive patching).
    A smaller decoder (d_layers layers of decoder_d_model) mixes channels as well when
    decoder_mode is mix_channel, which is how covariates inform the target; a flatten-linear head
    gives the forecast.
    """
    capabilities = Capabilities(direct=True, covariate=True, multi_output=True)
    expansion = 2

    @dataclass
    class Config:
        patch_len: int = hparam(16, "points per patch", tiny=8, low=1)
        d_model: int = d_model()
        e_layers: int = e_layers()
        ap_levels: int = hparam(3, "adaptive-patching levels of the backbone", tiny=2, low=0)
        d_layers: int = hparam(2, "decoder mixer layers", tiny=1, low=0)
        decoder_d_model: int | None = hparam(None, "decoder width (default: d_model)", low=1)
        decoder_mode: str = hparam("mix_channel", "whether the decoder mixes channels (needed for covariates)",
                                   choices=("mix_channel", "common_channel"))
        dropout: float = dropout()
        head_dropout: float = hparam(0.0, "dropout before the forecast head", low=0.0, high=1.0)
        use_norm: bool = use_norm()

    def __init__(self, configs):
        super().__init__()
        P, D = configs.patch_len, configs.d_model
        if P > configs.seq_len:
            raise ValueError(f"patch_len {P} is longer than seq_len {configs.seq_len}")
        if D % 2 ** (configs.ap_levels - 1):
            raise ValueError(f"d_model {D} must be divisible by 2 ** (ap_levels - 1) = {2 ** (configs.ap_levels - 1)}")
        self.patch_len, self.use_norm, self.n_outputs = P, configs.use_norm, configs.n_outputs
        self.n_patches = configs.seq_len // P
        d_dec = configs.decoder_d_model or D
        self.patcher = nn.Linear(P, D)
        self.backbone = nn.Sequential(*(
            AdaptivePatchLevel(2 ** level, configs.e_layers, D, self.n_patches, configs.enc_in, self.expansion,
                               configs.dropout) for level in reversed(range(configs.ap_levels))))
        self.adapter = nn.Linear(D, d_dec)
        self.decoder = nn.Sequential(*(
            MixerLayer(d_dec, self.n_patches, configs.enc_in, configs.decoder_mode == "mix_channel", self.expansion,
                       configs.dropout) for _ in range(configs.d_layers)))
        self.head = nn.Sequential(nn.Flatten(start_dim=-2), Dropout(configs.head_dropout),
                                  nn.Linear(self.n_patches * d_dec, configs.output_token_len * self.n_outputs))

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.use_norm:
            x, stats = normalize(x)
        recent = x[:, x.shape[1] - self.n_patches * self.patch_len:]
        patches = recent.transpose(1, 2).unfold(-1, self.patch_len, self.patch_len)  # (B, C, N, P)
        h = self.decoder(self.adapter(self.backbone(self.patcher(patches))))
        out = channels_last(split_points(self.head(h), self.n_outputs))
        return denormalize(out, stats) if self.use_norm else out
