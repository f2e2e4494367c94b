"""The quantile (pinball) loss over the levels of --quantiles: each of a point's k outputs is the forecast of one
level; the loss is the mean over points and levels of max(q (y - f), (q - 1) (y - f))."""
import torch

from utils.losses import Loss


def pinball(out: torch.Tensor, true: torch.Tensor, levels: torch.Tensor) -> torch.Tensor:
    """Per point and level: out (..., Q) at levels (Q,), true (...)."""
    error = true.unsqueeze(-1) - out
    levels = levels.to(out.dtype)
    return torch.maximum(levels * error, (levels - 1) * error)


LOSSES = [Loss("quantile", lambda out, true, levels: pinball(out, true, levels).mean(), kind="quantile",
               help="pinball loss over --quantiles: one output per level per point")]
