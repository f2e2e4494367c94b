"""ModernTCN's convolutions on the CPU, forward and backward: oneDNN's kernels (nn.Conv1d) against the batched
matrix products the model runs there (models/moderntcn.py), the same functions with the same weights.

    python -m scripts.benchmark.moderntcn_convs [--kernels 5,13,25,31,51,101] [--lengths 84,336,720]
                                                [--batch 512] [--variables 7] [--d_model 64] [--threads 1]
                                                [--repeat 3]

Depthwise rows, one per (kernel, length): DepthwiseConv1d's Toeplitz products against the direct convolution.
Pointwise rows: GroupedPointwiseConv1d at the blocks' two grouped maps (over the variables: M groups of
d_model -> d_model; over the features: d_model groups of M -> M). The defaults are ModernTCN's ETTh1 script's
sizes (batch 512, 7 variables x 64 features, 84 patches of a 336 lookback); at longer lengths the batch shrinks
so that each row holds about the same number of values. Shown: the best of --repeat timings of each path and
their ratio. Both paths are timed whatever the kernel size; models/moderntcn.TOEPLITZ_FROM, read from these
rows, decides which one the depthwise convolution takes. Numbers only; nothing is asserted.
"""
import argparse
import time

import torch
from torch import nn

from models.moderntcn import TOEPLITZ_FROM, DepthwiseConv1d, GroupedPointwiseConv1d
from utils import cli
from utils.errors import ConfigError


def best_seconds(apply, x: torch.Tensor, repeat: int) -> float:
    """The best time of a forward and a backward pass of `apply` on x."""
    def once() -> float:
        start = time.perf_counter()
        apply(x).sum().backward()
        return time.perf_counter() - start
    once()  # warm-up: oneDNN picks and caches its kernel
    return min(once() for _ in range(repeat))


def row(name: str, ours, direct, x: torch.Tensor, repeat: int) -> str:
    onednn, matmul = best_seconds(direct, x, repeat), best_seconds(ours, x, repeat)
    return f"{name:34s}  {onednn:8.3f}  {matmul:8.3f}  {onednn / matmul:15.2f}"


def main(argv=None) -> None:
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernels", type=cli.int_list, default=[5, 13, 25, 31, 51, 101], help="odd depthwise kernels")
    p.add_argument("--lengths", type=cli.int_list, default=[84, 336, 720], help="sequence lengths (patches)")
    p.add_argument("--batch", type=cli.at_least(1), default=512, help="batch at the first length")
    p.add_argument("--variables", type=cli.at_least(1), default=7, help="M")
    p.add_argument("--d_model", type=cli.at_least(1), default=64, help="D")
    p.add_argument("--threads", type=cli.at_least(1), default=1, help="intra-op threads")
    p.add_argument("--repeat", type=cli.at_least(1), default=3, help="timings per path; the best is shown")
    a = p.parse_args(argv)
    if not a.kernels or any(k < 1 or k % 2 == 0 for k in a.kernels):
        raise ConfigError(f"--kernels: odd sizes >= 1 expected, got {a.kernels}")
    if not a.lengths or min(a.lengths) < 1:
        raise ConfigError(f"--lengths: lengths >= 1 expected, got {a.lengths}")
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    M, D = a.variables, a.d_model
    print(f"{a.threads} thread(s); depthwise kernels from {TOEPLITZ_FROM} take the Toeplitz path")
    print(f"{'convolution':34s}  {'oneDNN s':>8s}  {'matmul s':>8s}  {'oneDNN / matmul':>15s}")
    for length in a.lengths:
        batch = max(1, a.batch * a.lengths[0] // length)
        x = torch.randn(batch, M * D, length, requires_grad=True)
        for kernel in a.kernels:
            conv = DepthwiseConv1d(M * D, kernel)
            print(row(f"depthwise k {kernel} N {length} B {batch}", conv.toeplitz,
                      lambda v, c=conv: nn.Conv1d.forward(c, v), x, a.repeat))
        for groups in (M, D):
            conv = GroupedPointwiseConv1d(M * D, M * D, groups)
            print(row(f"pointwise {groups} groups N {length} B {batch}", conv.matmul,
                      lambda v, c=conv: nn.Conv1d.forward(c, v), x, a.repeat))


if __name__ == "__main__":
    cli.run(main)
