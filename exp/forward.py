"""A batch through the model, one way for training, validation and test: the inputs the model contract says, mixed
precision, the forecast rolled out where the target is longer than one forecast, and prediction and target cut to
what the loss and the metrics compare. A probabilistic loss's forecasts carry k values per point in a last
dimension (batch, time, channels, k); a rolled-out forecast feeds back its point forecast (the median or mean), or,
drawing sample paths (--num_samples), each path's own samples."""
import math

import torch
from torch import nn

import models
from data_provider.windows import Batch
from models.contract import model_inputs
from utils.seeding import window_uniforms


class Forward:
    def __init__(self, config, autocast, loss):
        """loss: the run's utils.losses.Objective: its point forecast, fed back in rollouts, and its draws."""
        self.config, self.autocast, self.loss = config, autocast, loss
        self.caps = models.capabilities(config.model)

    def call(self, model: nn.Module, x: torch.Tensor, batch, shift: int, state=None) -> tuple:
        """The model's prediction for inputs x that start `shift` points after the batch's windows, and the loss
        terms a model with aux_loss adds in training ({} otherwise); a stateful model given `state` (() at the
        window) returns its new state in place of the terms."""
        inputs, kwargs = model_inputs(self.config, self.caps, x, batch, shift)
        if state is not None:
            kwargs["state"] = state
        with self.autocast:
            out = model(*inputs, **kwargs)
        pred, extra = out if state is not None or (self.caps.aux_loss and model.training) else (out, {})
        return pred.float(), extra

    def __call__(self, model: nn.Module, batch, rollout: bool = False, windows: torch.Tensor | None = None) -> tuple:
        """(prediction, target, the model's own loss terms) of a batch.

        rollout: feed forecasts back in steps of output_token_len until the target is covered (as a test scores);
        otherwise one forward: one output token per input token (autoregressive) or the forecast after the
        window (direct), the last token alone with --last_token. windows: the batch's window numbers, with
        --num_samples: sample paths drawn for them instead (sample_paths), (batch, time, channels, samples).
        """
        c, true, terms = self.config, batch.y, {}
        if windows is not None and c.num_samples:
            pred = self.sample_paths(model, batch, true.shape[1], windows)
        elif rollout:
            pred = self.rollout(model, batch, true.shape[1])
        else:
            pred, terms = self.call(model, batch.x, batch, 0)
            pred = pred[:, -true.shape[1]:]
            if c.last_token:
                pred, true = pred[:, -c.output_token_len:], true[:, -c.output_token_len:]
        if c.covariate:
            pred, true = pred[:, :, -1:], true[:, :, -1:]
        return pred, true, terms

    def rollout(self, model: nn.Module, batch, horizon: int, feed=None) -> torch.Tensor:
        """`horizon` points forecast output_token_len at a time, each step's forecast fed back as input: its point
        forecast, or what feed(step, output) returns (the rollout then returns those). A stateful model continues
        from its state with the fed points alone; any other model sees the last seq_len points again."""
        c, stateful = self.config, self.caps.stateful
        step, x, state, preds = c.output_token_len, batch.x, () if stateful else None, []
        n_steps = math.ceil(horizon / step)
        for i in range(n_steps):
            shift = (c.seq_len + (i - 1) * step if i else 0) if stateful else i * step
            out, extra = self.call(model, x, batch, shift, state)
            out = out[:, -step:]
            fed = self.loss.point(out) if feed is None else feed(i, out)
            preds.append(out if feed is None else fed)
            if i + 1 < n_steps:  # an exogenous model's one-channel forecast is never fed back: one step only
                x, state = (fed, extra) if stateful else (torch.cat([x, fed], dim=1)[:, -c.seq_len:], None)
        return torch.cat(preds, dim=1)[:, :horizon]

    def sample_paths(self, model: nn.Module, batch, horizon: int, windows: torch.Tensor) -> torch.Tensor:
        """(batch, horizon, channels, num_samples) float32 sample paths of a distribution forecast. Each path draws
        a step's points by the inverse CDF at uniforms of its window's own stream (utils/seeding.py:
        window_uniforms, keyed by `windows`, the windows' numbers in the evaluation) and feeds them back: ancestral
        sampling, so a rolled-out step carries the uncertainty of the steps before it. One forecast's samples all
        come from one forward; a rolled-out horizon runs every path through the model (num_samples x the batch)."""
        c, S, B = self.config, self.config.num_samples, len(batch.x)
        step = c.output_token_len
        shape = (math.ceil(horizon / step) * step, batch.y.shape[2], S)
        uniforms = window_uniforms(c.seed, windows.tolist(), shape).to(batch.x.device)
        if horizon <= step:
            out = self.call(model, batch.x, batch, 0)[0][:, -step:]
            return self.loss.draw(out, uniforms[:, :out.shape[1], -out.shape[2]:]).float()[:, :horizon]
        paths = Batch(*(None if t is None else t.repeat(S, *(1,) * (t.dim() - 1)) for t in batch))  # path s * B + b
        uniforms = uniforms.permute(3, 0, 1, 2).flatten(0, 1)

        def draw(i: int, out: torch.Tensor) -> torch.Tensor:
            u = uniforms[:, i * step:(i + 1) * step, -out.shape[2]:, None]
            return self.loss.draw(out, u)[..., 0].float()

        return self.rollout(model, paths, horizon, draw).unflatten(0, (S, B)).permute(1, 2, 3, 0)
