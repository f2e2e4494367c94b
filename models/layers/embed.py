"""Input embeddings of the TSLib family: value (causal-free conv), sinusoidal position, calendar features."""
import math

import torch
import torch.nn.functional as F
from torch import nn

from models.layers.dropout import Dropout


def sinusoidal_positions(length: int, d_model: int, device=None) -> torch.Tensor:
    """(length, d_model) sine/cosine table of Vaswani et al."""
    position = torch.arange(length, device=device, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model, device=device)
    table[:, 0::2] = torch.sin(position * div)
    table[:, 1::2] = torch.cos(position * div[: d_model // 2])
    return table


class TokenEmbedding(nn.Module):
    """Value embedding: a width-3 convolution over time with circular padding (TSLib's TokenEmbedding)."""

    def __init__(self, c_in: int, d_model: int):
        super().__init__()
        self.conv = nn.Conv1d(c_in, d_model, kernel_size=3, bias=False)
        nn.init.kaiming_normal_(self.conv.weight, mode="fan_in", nonlinearity="leaky_relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, C) -> (B, L, D)
        return self.conv(F.pad(x.transpose(1, 2), (1, 1), mode="circular")).transpose(1, 2)


class DataEmbedding(nn.Module):
    """Value + (optional) sinusoidal position + (optional) calendar-feature embedding, then dropout."""

    def __init__(self, c_in: int, d_model: int, n_marks: int, dropout: float, position: bool = True):
        super().__init__()
        self.value = TokenEmbedding(c_in, d_model)
        self.position = position
        self.calendar = nn.Linear(n_marks, d_model, bias=False) if n_marks else None
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None) -> torch.Tensor:
        h = self.value(x)
        if self.position:
            h = h + sinusoidal_positions(x.shape[1], h.shape[-1], x.device)
        if self.calendar is not None and x_mark is not None:
            h = h + self.calendar(x_mark)
        return self.dropout(h)
