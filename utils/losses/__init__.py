"""Training losses, each defined once: a function of (prediction, target) that training minimises and that
validation reports (early stopping and the best checkpoint read it).

Every module in this package lists its losses in `LOSSES`; add utils/losses/my_loss.py and the loss can be chosen
by name, with nothing else to edit.
"""
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from utils.registry import collect


@dataclass(frozen=True)
class Loss:
    name: str
    value: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (pred, true) -> the mean loss, a scalar
    help: str = ""


class LossFileError(ValueError):
    """A file in utils/losses/ that cannot serve: the message names it and what is wrong."""


@functools.cache
def registry() -> dict:
    """name -> Loss, for every loss the package's modules declare (imported on first use)."""
    return collect(__name__, __path__, "LOSSES", Loss, LossFileError)


def get(name: str) -> Callable:
    """The loss function of a registered loss."""
    return registry()[name].value
