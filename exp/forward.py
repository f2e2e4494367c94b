"""A batch through the model, one way for training, validation and test: the inputs the model contract says, mixed
precision, the forecast rolled out where the target is longer than one forecast, and prediction and target cut to
what the loss and the metrics compare. A probabilistic loss's forecasts carry k values per point in a last
dimension (batch, time, channels, k); a rolled-out forecast feeds back its point forecast (the median or mean)."""
import math

import torch
from torch import nn

import models
from models.contract import model_inputs


class Forward:
    def __init__(self, config, autocast, point):
        """point: the point forecast of a model's output (utils.losses.Objective.point)."""
        self.config, self.autocast, self.point = config, autocast, point
        self.caps = models.capabilities(config.model)

    def call(self, model: nn.Module, x: torch.Tensor, batch, shift: int) -> tuple[torch.Tensor, dict]:
        """The model's prediction for inputs x that start `shift` points after the batch's windows, and the loss
        terms a model with aux_loss adds in training ({} otherwise)."""
        inputs, kwargs = model_inputs(self.config, self.caps, x, batch, shift)
        with self.autocast:
            out = model(*inputs, **kwargs)
        pred, terms = out if self.caps.aux_loss and model.training else (out, {})
        return pred.float(), terms

    def __call__(self, model: nn.Module, batch, rollout: bool = False) -> tuple:
        """(prediction, target, the model's own loss terms) of a batch.

        rollout: feed forecasts back in steps of output_token_len until the target is covered (as a test scores);
        otherwise one forward: one output token per input token (autoregressive) or the forecast after the
        window (direct), the last token alone with --last_token.
        """
        c, true, terms = self.config, batch.y, {}
        if rollout:
            pred = self.rollout(model, batch, true.shape[1])
        else:
            pred, terms = self.call(model, batch.x, batch, 0)
            pred = pred[:, -true.shape[1]:]
            if c.last_token:
                pred, true = pred[:, -c.output_token_len:], true[:, -c.output_token_len:]
        if c.covariate:
            pred, true = pred[:, :, -1:], true[:, :, -1:]
        return pred, true, terms

    def rollout(self, model: nn.Module, batch, horizon: int) -> torch.Tensor:
        """`horizon` points forecast output_token_len at a time, each step's forecast fed back as input."""
        step, x, preds = self.config.output_token_len, batch.x, []
        n_steps = math.ceil(horizon / step)
        for i in range(n_steps):
            out = self.call(model, x, batch, i * step)[0][:, -step:]
            preds.append(out)
            if i + 1 < n_steps:  # an exogenous model's one-channel forecast is never fed back: one step only
                x = torch.cat([x, self.point(out)], dim=1)[:, -self.config.seq_len:]
        return torch.cat(preds, dim=1)[:, :horizon]
