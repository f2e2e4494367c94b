"""Instance normalisation of each input window: without affine (Non-stationary Transformer, use_norm) and
RevIN's, with a learnable per-channel affine."""
import torch
from torch import nn


def normalize(x: torch.Tensor, eps: float = 1e-5):
    """Standardise x (B, L, C) over time per window and channel; returns (x, stats for denormalize)."""
    mean = x.mean(1, keepdim=True)
    std = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + eps)
    return (x - mean) / std, (mean, std)


def denormalize(y: torch.Tensor, stats) -> torch.Tensor:
    """y (B, L, C), or (B, L, C, k) with k values per point (models/base.py: n_outputs), each undone alike."""
    mean, std = stats
    if y.dim() > mean.dim():
        mean, std = mean.unsqueeze(-1), std.unsqueeze(-1)
    return y * std + mean


class RevIN(nn.Module):
    """Reversible instance normalisation (Kim et al., ICLR 2022) of (B, L, C) windows: standardise each channel
    over time, then scale and shift by learnable per-channel parameters; undo both on the output. inverse_eps
    keeps the inverse's division finite should a weight reach 0 (each official code has its own)."""

    def __init__(self, channels: int, inverse_eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.inverse_eps = inverse_eps

    def normalize(self, x: torch.Tensor):
        x, stats = normalize(x)
        return x * self.weight + self.bias, stats

    def denormalize(self, y: torch.Tensor, stats) -> torch.Tensor:
        weight, bias = (self.weight, self.bias) if y.dim() == 3 else (self.weight[:, None], self.bias[:, None])
        return denormalize((y - bias) / (weight + self.inverse_eps), stats)
