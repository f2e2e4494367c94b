"""xPatch's sigmoid learning-rate schedule (Stitsyuk & Choi, AAAI 2025; its utils/tools.py, `--lradj sigmoid`):
the first epoch at the full rate (the official loop sets its first rate after epoch 1), then from 0-based epoch n
the factor sigmoid(0.5 (n - 10)) - sigmoid(0.05 (n - 100)): a warm-up from 0.004 to about 1 by epoch 20, then a slow
decay."""
import math

from utils.schedules import ScheduleContext, per_epoch


def _sigmoid(epoch: int, h: ScheduleContext) -> float:
    if epoch == 0:
        return 1.0
    return 1 / (1 + math.exp(-0.5 * (epoch - 10))) - 1 / (1 + math.exp(-0.05 * (epoch - 100)))


SCHEDULES = [per_epoch("sigmoid", _sigmoid, "xPatch: the full rate for epoch 1, then a sigmoid warm-up to about 1 by "
                                            "epoch 20 and a slow sigmoid decay")]
