"""Instance normalisation of each input window (RevIN without affine; Non-stationary Transformer)."""
import torch


def normalize(x: torch.Tensor, eps: float = 1e-5):
    """Standardise x (B, L, C) over time per window and channel; returns (x, stats for denormalize)."""
    mean = x.mean(1, keepdim=True)
    std = torch.sqrt(x.var(1, keepdim=True, unbiased=False) + eps)
    return (x - mean) / std, (mean, std)


def denormalize(y: torch.Tensor, stats) -> torch.Tensor:
    mean, std = stats
    return y * std + mean
