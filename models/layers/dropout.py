"""Dropout with a cheaper random mask on CPU, where torch's mask can cost more than the layer it follows."""
import torch
import torch.nn.functional as F
from torch import nn

LEVELS = 1 << 16  # resolution of the drop probability on the CPU path


def keep_mask(x: torch.Tensor, drop_level: int) -> torch.Tensor:
    """x-shaped mask: 0 with probability drop_level / LEVELS, else LEVELS / (LEVELS - drop_level), independently
    per element, so that x * mask keeps x's expectation exactly.

    One 64-bit draw of torch's generator gives four uniform 16-bit words, a quarter of the draws of
    bernoulli_, which takes one per element on CPU.
    """
    n = x.numel()
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_(-2 ** 63, None)
    words = words.view(torch.int16)[:n].view(x.shape)  # uniform on [-LEVELS/2, LEVELS/2)
    return (words >= drop_level - LEVELS // 2).to(x.dtype).mul_(LEVELS / (LEVELS - drop_level))


class Dropout(nn.Module):
    """nn.Dropout; on CPU its probability is rounded to a multiple of 2^-16 (at most 7.6e-6 off) and the mask
    is keep_mask, which draws a quarter of the random numbers (docs/performance.md: Dropout on CPU).

    The draws come from torch's default CPU generator, so torch.manual_seed and a checkpoint's RNG state
    govern them. CUDA (fused Philox), torch.compile (its own RNG), eval mode, and probabilities that round
    to 0 or 1 use F.dropout.
    """

    def __init__(self, p: float):
        super().__init__()
        self.p, self.drop_level = p, round(p * LEVELS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if (not self.training or x.device.type != "cpu" or not 0 < self.drop_level < LEVELS
                or torch.compiler.is_compiling()):
            return F.dropout(x, self.p, self.training)
        return x * keep_mask(x, self.drop_level)  # autograd keeps only the mask for the backward

    def extra_repr(self) -> str:
        return f"p={self.p}"
