"""xPatch's arctangent loss (Stitsyuk & Choi, AAAI 2025; its exp/exp_main.py): the MAE of horizon step j (1-based)
weighted by 1 + pi/4 - arctan(j), 1 at the first step and falling towards 1 - pi/4, so that the near future counts
more. The official code trains and validates (early stopping) on it, and tests on the plain metrics."""
import math

import torch

from utils.losses import Loss


def arctan_mae(pred: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    steps = torch.arange(1, pred.shape[1] + 1, dtype=torch.float64, device=pred.device)
    weight = (1 + math.pi / 4 - steps.atan()).to(pred.dtype).view(-1, *[1] * (pred.dim() - 2))
    return ((pred - true).abs() * weight).mean()


LOSSES = [Loss("arctan_mae", arctan_mae, help="MAE weighted per horizon step j by 1 + pi/4 - arctan(j) (xPatch)")]
