"""Huber loss: squared within delta of the target, absolute beyond (robust to outliers; delta 1 on scaled data)."""
from torch.nn import functional

from utils.losses import Loss

LOSSES = [Loss("huber", functional.huber_loss, help="Huber loss, delta 1: squared near the target, absolute beyond")]
