"""xPatch's exponential decompositions against their recursive definitions; its loss and learning-rate schedule
against the official code's formulas."""
import math

import pytest
import torch

from models.xpatch import ema, holt
from utils import losses, schedules
from utils.schedules import ScheduleContext


@pytest.mark.parametrize("alpha", [0.01, 0.3, 0.9])
def test_the_cumulative_sum_ema_is_the_recursion_over_long_windows(alpha):
    """s_0 = x_0, s_t = alpha x_t + (1 - alpha) s_(t-1), step by step in float64: the closed form divides by powers
    down to (1 - alpha)^719, far below float32's range (0.3), and below float64's (0.9: taken in spans of 300), and
    agrees to float32 rounding."""
    x = torch.randn(3, 720, dtype=torch.float64).cumsum(-1)
    s, expected = x[:, 0], [x[:, 0]]
    for t in range(1, 720):
        s = alpha * x[:, t] + (1 - alpha) * s
        expected.append(s)
    got = ema(x.float(), alpha)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, torch.stack(expected, -1).float(), rtol=1e-5, atol=1e-5)


def test_holt_follows_a_straight_line_exactly_and_smooths_noise():
    """A linear trend is Holt's fixed point (level = the line, slope = its step); on noise around it the levels stay
    closer to the line than the points."""
    line = 2.0 + 0.5 * torch.arange(96, dtype=torch.float64)
    torch.testing.assert_close(holt(line[None], 0.3, 0.2)[0], line)
    torch.manual_seed(0)
    noisy = line + torch.randn(200, 96, dtype=torch.float64)
    levels = holt(noisy, 0.3, 0.2)
    assert ((levels - line)[:, 20:].square().mean() < 0.5 * (noisy - line)[:, 20:].square().mean())


def test_the_arctangent_loss_weights_each_horizon_step_by_one_plus_a_quarter_pi_minus_its_arctangent():
    pred, true = torch.zeros(2, 3, 4), torch.tensor([1.0, -2.0, 4.0]).view(1, 3, 1).expand(2, 3, 4)
    weights = [1 + math.pi / 4 - math.atan(j) for j in (1, 2, 3)]  # 1.0, 0.678, 0.536
    expected = (weights[0] * 1 + weights[1] * 2 + weights[2] * 4) / 3
    assert losses.get("arctan_mae")(pred, true).item() == pytest.approx(expected, rel=1e-6)


def test_the_sigmoid_schedule_keeps_the_first_epoch_then_warms_up_and_decays():
    """The official factors after 0-based epoch n: sigmoid(0.5 (n - 10)) - sigmoid(0.05 (n - 100))."""
    h = ScheduleContext(steps_per_epoch=10, train_epochs=100, learning_rate=1e-3, pct_start=0.3)
    factor = schedules.registry()["sigmoid"].factor
    got = [factor(epoch * 10, h) for epoch in (0, 1, 5, 10, 20, 99)]
    assert got == pytest.approx([1.0, 0.003953, 0.067281, 0.489013, 0.975321, 0.512497], abs=1e-6)
