"""Batch statistics that a model's loss is built from, kept equal to one process's under DDP."""
import torch
from torch import nn


class BatchMean(nn.Module):
    """Mean over the first dimension of a statistic that takes no gradient (the share of tokens routed to
    each expert, say). Under DDP the framework swaps it for CrossRankBatchMean (utils/sync_batchnorm), the
    mean over every rank's rows, so a loss built from it equals one process's on the global batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad:
            raise ValueError("BatchMean averages statistics that take no gradient; detach the input")
        return x.float().mean(0)
