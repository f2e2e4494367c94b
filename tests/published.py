"""What the tests of the models that read published checkpoints share (tests/unit/test_foundation_*.py)."""
import torch

import models


def load(name: str, folder, seq_len: int, horizon: int, n_outputs: int = 1, channels: int = 3, **hparams):
    """models/<name>.py built as --pretrained builds it (every hyper-parameter at its default, the checkpoint's
    where it has one; `hparams` as flags would give them) for a direct forecast of `horizon` points of `channels`
    series, the published weights loaded; in eval mode."""
    model_class = models.model_class(name)
    found = model_class.published(str(folder))
    own = {f.name: f.default for f in models.hyperparameter_fields(model_class)}
    task = {"seq_len": seq_len, "output_token_len": horizon, "enc_in": channels, "covariate": False,
            "n_outputs": n_outputs, "nonautoregressive": True, **found.task}
    model = models.build(name, task, {**own, **found.defaults, **hparams, **found.hparams})
    model.load_published(str(folder))
    return model.eval()


def assert_training_forecasts_alike_with_gradients(model, x: torch.Tensor) -> None:
    """In training mode the model forecasts x exactly as in eval mode, and a loss on it sends finite gradients to
    every parameter: fine-tuning trains through the whole forecast. A model whose forecast path has dropout is built
    without it for this (--dropout 0)."""
    with torch.no_grad():
        evaluated = model.eval()(x)
    out = model.train()(x)
    torch.testing.assert_close(out, evaluated, rtol=0, atol=0)
    (out - x.mean()).square().mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
