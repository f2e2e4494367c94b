"""N-HiTS's and neuralforecast's schedule: StepLR stepped every optimizer step, the lr halved after each third of
the run's steps (lr_decay 0.5, n_lr_decays 3: step_size = max_steps // 3)."""
from utils.schedules import Schedule


def halved_thirds(step: int, context) -> float:
    return 0.5 ** (step // max(context.total_steps // 3, 1))


SCHEDULES = [Schedule("step_halving", halved_thirds, "x0.5 after each third of the steps (N-HiTS, neuralforecast)")]
