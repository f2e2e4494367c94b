"""Process-wide CPU settings of a training loop, made once when a run starts (run.main) and by the benchmarks
that time its runs: glibc's malloc thresholds (utils.allocator) and denormal floats flushed to zero.

x86 CPUs handle floats below 2**-126 (float32's smallest normal number, 1.2e-38) in microcode, about a hundred
times slower than normal ones. Training meets them where a gradient is scaled by a vanishing weight: a trained
TimesNet weighs each period's output by a softmax that gives some periods next to nothing, and its training
steps on ETTh1 ran three times slower for it (docs/performance.md). Flushing them to zero changes only numbers
smaller than 1.2e-38 in magnitude.
"""
import torch

from utils.allocator import keep_freed_memory


def denormals_flushed() -> bool:
    """Whether this thread's arithmetic flushes denormal floats to zero (probed, not remembered)."""
    return (torch.tensor([1e-39]) * 1.0).item() == 0.0


def prepare_training_process() -> dict:
    """Apply both settings; returns which took effect: {"malloc": bool, "flush_denormals": bool}."""
    return {"malloc": keep_freed_memory(), "flush_denormals": torch.set_flush_denormal(True)}
