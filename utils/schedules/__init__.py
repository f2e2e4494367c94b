"""Learning-rate scaling with world size, gradual warm-up, and the schedules, each defined once.

lr(step) = learning_rate x world_factor x schedule(step) x warmup(step)

A schedule is a factor of the world-scaled learning rate at every optimizer step: per-epoch schedules
(TSLib's lradj) hold theirs for an epoch, per-step ones change every step. Every module in this package lists
its schedules in `SCHEDULES`; add utils/schedules/my_schedule.py and `--lradj my_schedule` uses it.
"""
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from utils.registry import collect

LR_SCALES = ("linear", "sqrt", "none")


@dataclass(frozen=True)
class ScheduleContext:
    """What a schedule may depend on besides the step."""
    steps_per_epoch: int
    train_epochs: int
    learning_rate: float  # the single-process lr (TSLib's type2 table is absolute)
    pct_start: float      # share of the steps that warm up, for the schedules that declare it
    max_steps: int = 0    # a run by steps (--train_steps): its length; 0: train_epochs whole epochs

    @property
    def total_steps(self) -> int:
        return self.max_steps or self.steps_per_epoch * self.train_epochs


@dataclass(frozen=True)
class Schedule:
    name: str
    factor: Callable[[int, ScheduleContext], float]  # 0-based optimizer step -> multiplier of the scaled lr
    help: str = ""
    flags: tuple = ()  # flags it reads beyond the step (e.g. pct_start): part of a run's identity only then
    beta1: Callable[[int, ScheduleContext], float] | None = None  # Adam's beta1 per step where the reference code sets
    # it (torch's OneCycleLR cycles it); None: Adam's own 0.9 throughout
    revision: int = 1  # raised when a change to the schedule changes results: part of a run's identity past the first


def per_epoch(name: str, epoch_factor: Callable[[int, ScheduleContext], float], help: str = "", **kw) -> Schedule:
    """A schedule that holds epoch_factor(0-based epoch) for every step of that epoch."""
    return Schedule(name, lambda step, h: epoch_factor(step // h.steps_per_epoch, h), help, **kw)


class ScheduleFileError(ValueError):
    """A file in utils/schedules/ that cannot serve: the message names it and what is wrong."""


@functools.cache
def registry() -> dict:
    """name -> Schedule, from every module of the package (imported on first use)."""
    return collect(__name__, __path__, "SCHEDULES", Schedule, ScheduleFileError)


def world_factor(rule: str, world_size: int) -> float:
    """Linear scaling (Goyal et al. 2017): the global batch grows with world size, so does the lr."""
    return {"linear": float(world_size), "sqrt": math.sqrt(world_size), "none": 1.0}[rule]


def warmup_factor(step: int, warmup_steps: int, world: float) -> float:
    """Gradual warm-up from the single-process lr to the scaled lr (a no-op when world == 1)."""
    if warmup_steps <= 0 or step >= warmup_steps:
        return 1.0
    return 1.0 / world + (1.0 - 1.0 / world) * step / warmup_steps


class StepSchedule:
    """Sets every param group's lr to its base lr x factor(step) before each optimizer step.

    What LambdaLR does, without its wrapping of optimizer.step to check call order, which costs more than
    setting the lr (docs/performance.md).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, factor: Callable[[int], float],
                 beta1: Callable[[int], float] | None = None):
        self.optimizer, self.factor, self.beta1 = optimizer, factor, beta1
        self.base_lrs = [group["lr"] for group in optimizer.param_groups]
        self.steps = 0  # optimizer steps taken
        self._apply()

    def step(self) -> None:
        self.steps += 1
        self._apply()

    def _apply(self) -> None:
        factor = self.factor(self.steps)
        beta1 = self.beta1(self.steps) if self.beta1 else None
        for group, base_lr in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base_lr * factor
            if beta1 is not None:
                group["betas"] = (beta1, group["betas"][1])

    def lr_at(self, step: int) -> float:
        """The first param group's lr at optimizer step `step`, as _apply sets it."""
        return self.base_lrs[0] * self.factor(step)

    def get_last_lr(self) -> list:
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        return {"steps": self.steps, "base_lrs": list(self.base_lrs)}

    def load_state_dict(self, state: dict) -> None:
        self.steps, self.base_lrs = state["steps"], list(state["base_lrs"])
        self._apply()


def build_scheduler(optimizer, lradj: str, context: ScheduleContext, world: float,
                    warmup_epochs: float) -> StepSchedule:
    """Stepped once per optimizer step; the optimizer's base lr must already be the scaled lr."""
    schedule = registry()[lradj]
    warmup_steps = round(warmup_epochs * context.steps_per_epoch)
    return StepSchedule(optimizer,
                        lambda step: schedule.factor(step, context) * warmup_factor(step, warmup_steps, world),
                        schedule.beta1 and (lambda step: schedule.beta1(step, context)))
