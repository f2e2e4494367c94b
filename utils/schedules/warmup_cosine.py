"""Linear warm-up from zero over the first pct_start of the steps, then a half cosine to zero, per step."""
import math

from utils.schedules import ScheduleContext, Schedule


def warmup_cosine(step: int, h: ScheduleContext) -> float:
    warmup = max(round(h.pct_start * h.total_steps), 1)
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * min((step - warmup) / max(h.total_steps - warmup, 1), 1.0)))


SCHEDULES = [Schedule("warmup_cosine", warmup_cosine, "linear warm-up over --pct_start of the steps, then cosine "
                      "to zero, per step", flags=("pct_start",))]
