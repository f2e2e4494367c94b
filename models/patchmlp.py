from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, dropout, e_layers, hparam, use_norm
from models.layers.decomposition import SeriesDecomposition
from models.layers.dropout import Dropout
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points


def patch_lengths(text: str) -> list:
    try:
        found = [int(n) for n in text.split(",")]
    except ValueError:
        raise ValueError(f"patch_sizes: expected comma-separated integers, got {text!r}") from None
    if not found or min(found) < 2:
        raise ValueError(f"patch_sizes: expected lengths of at least 2, got {text!r}")
    return found


class PatchScale(nn.Module):
    """One scale of the multi-scale patch embedding: each channel's window cut into patches of patch_len every
    patch_len // 2 steps (a tail that fills no patch is left out), each patch embedded by one linear layer into
    width // n_patches, the patches' embeddings concatenated and mapped by a linear layer to width."""

    def __init__(self, seq_len: int, patch_len: int, width: int):
        super().__init__()
        self.patch_len, self.stride = patch_len, patch_len // 2
        n_patches = (seq_len - patch_len) // self.stride + 1
        if width // n_patches < 1:
            raise ValueError(f"patch length {patch_len}: {n_patches} patches of a window of {seq_len} leave each "
                             f"none of the scale's {width} features (d_model / number of scales); raise d_model")
        self.patch = nn.Linear(patch_len, width // n_patches)
        self.merge = nn.Linear(width // n_patches * n_patches, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, L) -> (B, C, width)
        return self.merge(self.patch(x.unfold(-1, self.patch_len, self.stride)).flatten(-2))


class MixerLayer(nn.Module):
    """Intra- then inter-variable mixing of (B, C, D) tokens: y0 = LN(x + MLP over features(x)); y1 = MLP over
    channels(y0); out = LN(y1 * y0 + x). One LayerNorm serves both places, as in the official code; each MLP is
    linear, GELU, dropout."""

    def __init__(self, d_model: int, channels: int, p: float):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(), Dropout(p))
        self.channels = nn.Sequential(nn.Linear(channels, channels), nn.GELU(), Dropout(p))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y0 = self.norm(x + self.features(x))
        y1 = self.channels(y0.transpose(1, 2)).transpose(1, 2)
        return self.norm(y1 * y0 + x)


class Model(nn.Module):
    """PatchMLP: multi-scale patch embeddings of each variate, split by a moving average into a smooth part and a
    residual, each mixed by MLPs within and across variates.

    Tang, Zhang. "Unlocking the Power of Patch: Patch-Based MLP for Long-Term Time Series Forecasting." AAAI 2025.
    https://arxiv.org/abs/2405.13575 (official code: github.com/TangPeiwang/PatchMLP, model/PatchMLP.py and
    layers/Embed.py; TSLib has no port)

    Each channel's window (standardised per window and channel, use_norm) is embedded at every patch length of
    patch_sizes (PatchScale: patches overlapping by half, d_model / len(patch_sizes) features each) and the scales'
    embeddings concatenated into one token of d_model per variate. A moving average of moving_avg over the token's
    features (ends padded by repetition) splits it into a smooth part and a residual; each goes through its own
    e_layers mixer layers (MixerLayer: an MLP across features per variate, then one across variates whose output
    gates the first's elementwise). The two parts' sum is projected linearly to the horizon (k values a point with
    n_outputs k). Defaults are the official run.py's and Emb's (d_model 1024, e_layers 1, patch lengths 48, 24, 12,
    6, a moving average of 13, dropout 0.1, use_norm on); the official repository has no script for its model (its
    scripts file runs another model, PDMLP, through a run_longExp.py it lacks).

    Deviations from the official code: the moving-average kernel is the moving_avg flag (the official model fixes
    13, its flag's default, and ignores the flag) and the mixers' dropout the dropout flag (fixed 0.1 there, also
    the flag's default); the patch lengths are a flag (fixed 48, 24, 12, 6 there; with these, seq_len must be at
    least 48); the official second LayerNorm of each mixer layer, built but never called, does not exist here. The
    window mean is not detached (the input carries no gradient, so this changes nothing).
    """
    capabilities = Capabilities(direct=True, covariate=True, multi_output=True)

    @dataclass
    class Config:
        d_model: int = hparam(1024, "width of each variate's token (divisible by the number of patch lengths)",
                              tiny=64, low=1)
        e_layers: int = e_layers(1)
        patch_sizes: str = hparam("48,24,12,6", "patch lengths of the multi-scale patch embedding, comma-separated "
                                                "(each patch advances by half its length)", tiny="16,8")
        moving_avg: int = hparam(13, "moving-average kernel over the token's features (smooth part / residual)",
                                 tiny=5, low=1)
        dropout: float = dropout(0.1)
        use_norm: bool = use_norm(True)

    def __init__(self, configs):
        super().__init__()
        lengths = patch_lengths(configs.patch_sizes)
        D, C = configs.d_model, configs.enc_in
        if D % len(lengths):
            raise ValueError(f"d_model {D} must be divisible by the number of patch lengths, {len(lengths)}")
        if max(lengths) > configs.seq_len:
            raise ValueError(f"seq_len {configs.seq_len} must be at least the longest patch, {max(lengths)}")
        self.use_norm, self.n_outputs = configs.use_norm, configs.n_outputs
        self.scales = nn.ModuleList(PatchScale(configs.seq_len, n, D // len(lengths)) for n in lengths)
        self.decomposition = SeriesDecomposition(configs.moving_avg)
        self.seasonal = nn.Sequential(*(MixerLayer(D, C, configs.dropout) for _ in range(configs.e_layers)))
        self.trend = nn.Sequential(*(MixerLayer(D, C, configs.dropout) for _ in range(configs.e_layers)))
        self.projection = nn.Linear(D, configs.output_token_len * self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.use_norm:
            x, stats = normalize(x)
        tokens = torch.cat([scale(x.transpose(1, 2)) for scale in self.scales], dim=-1)  # (B, C, D)
        seasonal, trend = self.decomposition(tokens)
        out = self.projection(self.seasonal(seasonal) + self.trend(trend))
        out = channels_last(split_points(out, self.n_outputs))
        return denormalize(out, stats) if self.use_norm else out
