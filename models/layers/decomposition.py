import torch
import torch.nn.functional as F
from torch import nn


class SeriesDecomposition(nn.Module):
    """Trend = moving average with the ends padded by repetition; seasonal = input - trend (Autoformer).

    An even kernel pads one more point before than after, as the official FEDformer does (the official
    Autoformer and DLinear accept odd kernels only; for those both sides get (k - 1) / 2)."""

    def __init__(self, kernel_size: int):
        super().__init__()
        self.kernel_size = kernel_size

    def forward(self, x: torch.Tensor):  # x: (..., L), averaged along the last axis
        shape = x.shape
        x = x.reshape(-1, 1, shape[-1])
        front, back = self.kernel_size // 2, (self.kernel_size - 1) // 2
        trend = F.avg_pool1d(F.pad(x, (front, back), mode="replicate"), self.kernel_size, stride=1)
        return (x - trend).reshape(shape), trend.reshape(shape)
