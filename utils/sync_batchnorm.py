"""Batch statistics over the whole DDP group, so a DDP run computes them like one big batch.

BatchNorm: torch's SyncBatchNorm runs on CUDA only; CrossRankBatchNorm does the same over gloo on CPU.
models.layers.batch_stats.BatchMean (a statistic a model's own loss uses): CrossRankBatchMean.
"""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from models.layers.batch_stats import BatchMean


class _AllReduceSum(torch.autograd.Function):
    """Sum over ranks; the gradient of a sum shared by every rank is the sum of their gradients."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class CrossRankBatchNorm(_BatchNorm):
    """Training statistics from one differentiable all_reduce of (sum, sum of squares, count).

    Sums are taken in float64, so E[x^2] - E[x]^2 keeps float32 BatchNorm's accuracy; the backward
    all_reduce sums every rank's gradient with respect to the shared statistics.
    """

    def _check_input_dim(self, x: torch.Tensor) -> None:
        if x.dim() < 2:
            raise ValueError(f"expected at least 2D input, got {x.dim()}D")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        dims = [0, *range(2, x.dim())]
        shape = [1, -1] + [1] * (x.dim() - 2)
        wide = x.double()
        count = torch.full((1,), x.numel() // x.shape[1], dtype=torch.float64, device=x.device)
        totals = _AllReduceSum.apply(torch.cat([wide.sum(dims), wide.square().sum(dims), count]))
        C = x.shape[1]
        n = totals[-1]
        mean = totals[:C] / n
        var = totals[C:2 * C] / n - mean.square()
        y = (x - mean.to(x.dtype).view(shape)) * torch.rsqrt(var.to(x.dtype) + self.eps).view(shape)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        if self.track_running_stats:
            self._update_running_stats(mean.detach(), var.detach() * n / (n - 1))
        return y

    @torch.no_grad()
    def _update_running_stats(self, mean: torch.Tensor, unbiased_var: torch.Tensor) -> None:
        self.num_batches_tracked += 1
        momentum = 1.0 / self.num_batches_tracked.item() if self.momentum is None else self.momentum
        self.running_mean.lerp_(mean.to(self.running_mean.dtype), momentum)
        self.running_var.lerp_(unbiased_var.to(self.running_var.dtype), momentum)


class CrossRankBatchMean(BatchMean):
    """The mean over every rank's rows in training; a statistic without gradient, so one plain all_reduce of
    (sums, count). Each rank then builds its loss from the global statistic, and DDP's gradient average is
    the gradient of one process's loss on the global batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (self.training and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        if x.requires_grad:
            raise ValueError("BatchMean averages statistics that take no gradient; detach the input")
        totals = torch.cat([x.double().sum(0).reshape(-1), x.new_full((1,), x.shape[0], dtype=torch.float64)])
        dist.all_reduce(totals)
        return (totals[:-1] / totals[-1]).float().view(x.shape[1:])


def sync_batchnorm(module: nn.Module, device: torch.device) -> nn.Module:
    """Every BatchNorm and BatchMean of `module` synchronised across ranks (call under DDP, before moving to
    the device)."""
    if device.type == "cuda":
        module = nn.SyncBatchNorm.convert_sync_batchnorm(module)
    return _swap_for_cross_rank(module, batchnorm=device.type != "cuda")


def _swap_for_cross_rank(module: nn.Module, batchnorm: bool) -> nn.Module:
    for name, child in module.named_children():
        if batchnorm and isinstance(child, _BatchNorm):
            synced = CrossRankBatchNorm(child.num_features, child.eps, child.momentum, child.affine,
                                        child.track_running_stats)
            synced.load_state_dict(child.state_dict())
            setattr(module, name, synced)
        elif type(child) is BatchMean:
            setattr(module, name, CrossRankBatchMean())
        else:
            _swap_for_cross_rank(child, batchnorm)
    return module
