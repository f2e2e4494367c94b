"""The model contract, from the framework's side: what a model is given for a window, what it must return, and
the one-window probe that checks a model before any step (and that block discovery for --fsdp and
--activation_checkpointing runs it through). tests/unit/test_models.py holds every registered model to it.

`task` is anything with the task's fields (the run's configuration): model, seq_len, input_token_len,
output_token_len, covariate. A batch is data_provider.windows.Batch (x, y, x_mark, position).
"""
import torch
from torch import nn

import models


def expected_output_shape(task, n_channels: int, batch: int, n_outputs: int = 1) -> tuple:
    """What a model's forward must return: one output token per input token for token models run autoregressively;
    otherwise (every direct run) the forecast of output_token_len points after the window (the target alone for an
    exogenous model in covariate mode); with n_outputs k > 1, k values per point in a last dimension."""
    caps = models.capabilities(task.model)
    per_point = (n_outputs,) if n_outputs > 1 else ()
    if caps.token_input and not task.nonautoregressive:
        return batch, task.seq_len // task.input_token_len * task.output_token_len, n_channels, *per_point
    return batch, task.output_token_len, 1 if caps.exogenous and task.covariate else n_channels, *per_point


def model_inputs(task, caps: models.Capabilities, x: torch.Tensor, batch, shift: int) -> tuple[tuple, dict]:
    """(args, kwargs) of a model's forward for inputs x that start `shift` points after the batch's windows:
    the calendar features of x's points (and of the output_token_len after them, for future_marks), the windows'
    positions. x is a window of seq_len points, or the points a stateful model continues with."""
    kwargs = {"position": batch.position + shift} if caps.positions else {}
    if batch.x_mark is None:
        return (x, None), kwargs
    length = x.shape[1] + (task.output_token_len if caps.future_marks else 0)
    marks = batch.x_mark[:, shift:shift + length]
    if marks.shape[1] < length:
        # a rolled forecast's last step reaches past the test horizon: the points it adds there are cut,
        # and the calendar row they see is the last one repeated
        marks = torch.cat([marks, marks[:, -1:].expand(-1, length - marks.shape[1], -1)], dim=1)
    return (x, marks), kwargs


@torch.no_grad()
def one_window(model: nn.Module, task, batch) -> torch.Tensor:
    """The model's output for one window (a batch of one, on the CPU), in eval mode: no randomness drawn, no
    statistics updated."""
    inputs, kwargs = model_inputs(task, models.capabilities(task.model), batch.x, batch, 0)
    model.eval()
    out = model(*inputs, **kwargs)
    model.train()
    return out


def output_problem(model: nn.Module, task, batch, n_channels: int, n_outputs: int = 1) -> str | None:
    """Why the model's output for one window breaks the contract (None: it keeps it)."""
    out = one_window(model, task, batch)
    expected = expected_output_shape(task, n_channels, 1, n_outputs)
    if tuple(out.shape) != expected:
        layout = "(batch, time, channels, values per point)" if n_outputs > 1 else "(batch, time, channels)"
        return (f"model {task.model} returned shape {tuple(out.shape)} for one window, expected {expected} "
                f"{layout}; see 'Adding a model' in README.md")
    return None
