"""Learning-rate scaling with world size, gradual warm-up, and the per-epoch schedules of TSLib/PatchTST.

lr(step) = learning_rate * world_factor * epoch_factor(epoch) * warmup(step)
"""
import math
from typing import Callable

import torch

LR_SCALES = ("linear", "sqrt", "none")
LRADJ = ("type1", "type2", "type3", "cosine", "constant")
# type2's absolute learning rates (TSLib), keyed by the epoch (0-based) from which they apply
_TYPE2 = {2: 5e-5, 4: 1e-5, 6: 5e-6, 8: 1e-6, 10: 5e-7, 15: 1e-7, 20: 5e-8}


def world_factor(rule: str, world_size: int) -> float:
    """Linear scaling (Goyal et al. 2017): the global batch grows with world size, so does the lr."""
    return {"linear": float(world_size), "sqrt": math.sqrt(world_size), "none": 1.0}[rule]


def epoch_factor(lradj: str, epoch: int, learning_rate: float, train_epochs: int) -> float:
    """Multiplier of the (scaled) lr during 0-based `epoch`.

    The reference code calls adjust_learning_rate(epoch + 1) after each epoch, so its schedules
    start one epoch late; these reproduce that timing exactly:
    type1: 1, 1, 0.5, 0.25, ...           (TSLib, DLinear)
    type3: 1, 1, 1, 1, 0.9, 0.81, ...     (PatchTST: `epoch < 3` checked with epoch + 1)
    type2: TSLib's absolute table, rescaled by learning_rate
    cosine: 0.5 * (1 + cos(pi * epoch / train_epochs))
    """
    if lradj == "type1":
        return 0.5 ** max(epoch - 1, 0)
    if lradj == "type3":
        return 0.9 ** max(epoch - 3, 0)
    if lradj == "type2":
        reached = [k for k in _TYPE2 if k <= epoch]
        return _TYPE2[max(reached)] / learning_rate if reached else 1.0
    if lradj == "cosine":
        return 0.5 * (1 + math.cos(math.pi * epoch / train_epochs))
    if lradj == "constant":
        return 1.0
    raise ValueError(f"unknown lradj {lradj!r}")


def warmup_factor(step: int, warmup_steps: int, world: float) -> float:
    """Gradual warm-up from the single-process lr to the scaled lr (a no-op when world == 1)."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return 1.0
    return 1.0 / world + (1.0 - 1.0 / world) * step / warmup_steps


class StepSchedule:
    """Sets every param group's lr to its base lr x factor(step) before each optimizer step.

    What LambdaLR does, for a fraction of its per-step cost (7 µs against under 2 µs measured, one DLinear
    step taking ~800 µs): LambdaLR also wraps optimizer.step to check call order.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, factor: Callable[[int], float]):
        self.optimizer, self.factor = optimizer, factor
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.steps = 0  # optimizer steps taken
        self._apply()

    def step(self) -> None:
        self.steps += 1
        self._apply()

    def _apply(self) -> None:
        factor = self.factor(self.steps)
        for group, base_lr in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base_lr * factor

    def get_last_lr(self) -> list:
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        return {"steps": self.steps, "base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state: dict) -> None:
        self.steps, self.base_lrs = state["steps"], list(state["base_lrs"])
        self._apply()


def build_scheduler(optimizer, lradj: str, learning_rate: float, train_epochs: int, world: float,
                    steps_per_epoch: int, warmup_epochs: float) -> StepSchedule:
    """Stepped once per optimizer step; the optimizer's base lr must already be the scaled lr."""
    warmup_steps = round(warmup_epochs * steps_per_epoch)

    def factor(step: int) -> float:
        return (epoch_factor(lradj, step // steps_per_epoch, learning_rate, train_epochs)
                * warmup_factor(step, warmup_steps, world))

    return StepSchedule(optimizer, factor)
