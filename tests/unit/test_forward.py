"""Rolled-out forecasts and sample paths (exp/forward.py) against a model whose forecast is written out by hand:
each next value is the sum of every value the series has had, plus the calendar feature of the point predicted."""
import math
from types import SimpleNamespace

import torch
from torch import nn

from data_provider.windows import Batch
from exp.forward import Forward
from models.base import Capabilities
from utils import losses, metrics
from utils.seeding import window_uniforms

L, H = 6, 5  # lookback, horizon rolled out a point at a time


class RunningSum(nn.Module):
    """Next value: the sum of the series so far plus the next point's calendar feature; with two outputs per point
    (a Gaussian's location and spread) the spread's raw output is the location's, so the scale is softplus(0)."""
    capabilities = Capabilities(autoregressive=True, direct=False, token_input=True, time_marks=True,
                                future_marks=True, stateful=True)

    def __init__(self, k: int = 1):
        super().__init__()
        self.k = k

    def forward(self, x, x_mark=None, state=None):
        total = (state[0] if state else 0) + x.cumsum(1)
        out = total + x_mark[:, 1:x.shape[1] + 1]
        if self.k > 1:
            out = torch.stack([out, out], dim=-1)
        return out if state is None else (out, (total[:, -1:],))


def _forward(k: int, num_samples=None, stateful=True):
    config = SimpleNamespace(model="running", seq_len=L, output_token_len=1, covariate=False, last_token=False,
                             num_samples=num_samples, seed=5)
    loss = losses.objective("gaussian" if k > 1 else "mse", metrics.GRID)
    forward = Forward.__new__(Forward)
    forward.config, forward.autocast, forward.loss = config, torch.autocast("cpu", enabled=False), loss
    forward.caps = RunningSum.capabilities if stateful else Capabilities(autoregressive=True, direct=False,
                                                                         token_input=True, time_marks=True,
                                                                         future_marks=True)
    return forward


def _batch():
    torch.manual_seed(0)
    x, marks = torch.randn(3, L, 1, dtype=torch.float64), torch.randn(3, L + H, 1, dtype=torch.float64)
    return Batch(x, torch.zeros(3, H, 1, dtype=torch.float64), marks, torch.arange(3))


def test_a_stateful_rollout_feeds_each_step_alone_and_reads_the_calendar_of_the_point_it_predicts():
    batch, history, expected = _batch(), _batch().x, []
    for i in range(H):
        expected.append(history.sum(1, keepdim=True) + batch.x_mark[:, L + i:L + i + 1])
        history = torch.cat([history, expected[-1]], dim=1)
    found = _forward(1).rollout(RunningSum(), batch, H)
    torch.testing.assert_close(found, torch.cat(expected, dim=1).float(), rtol=1e-6, atol=1e-5)


def test_a_window_sliding_rollout_sees_the_last_seq_len_points_again():
    batch, history, expected = _batch(), _batch().x, []
    for i in range(H):
        expected.append(history[:, -L:].sum(1, keepdim=True) + batch.x_mark[:, L + i:L + i + 1])
        history = torch.cat([history, expected[-1]], dim=1)
    found = _forward(1, stateful=False).rollout(RunningSum(), batch, H)
    torch.testing.assert_close(found, torch.cat(expected, dim=1).float(), rtol=1e-6, atol=1e-5)


def test_sample_paths_feed_each_path_its_own_draws_at_its_windows_uniforms():
    """Ancestral sampling written out: path s of window w draws step t at location + softplus(0) z(u), u its
    window's uniform (w, t, s), and its next location is the sum of its own history."""
    batch, windows = _batch(), torch.tensor([4, 0, 9])
    found = _forward(2, num_samples=4).sample_paths(RunningSum(k=2), batch, H, windows)
    u = window_uniforms(5, windows.tolist(), (H, 1, 4))
    sigma = math.log(2) + losses.SCALE_FLOOR
    history = batch.x.unsqueeze(-1).expand(-1, -1, -1, 4)  # (window, time, channel, path)
    for t in range(H):
        loc = history.sum(1) + batch.x_mark[:, L + t].unsqueeze(-1)
        draw = loc + sigma * math.sqrt(2) * torch.erfinv(2 * u[:, t] - 1)
        history = torch.cat([history, draw.unsqueeze(1)], dim=1)
    torch.testing.assert_close(found, history[:, L:].float(), rtol=1e-5, atol=1e-4)
    again = _forward(2, num_samples=4).sample_paths(RunningSum(k=2), batch, H, windows)
    assert torch.equal(found, again), "seeded: the same windows draw the same paths"
