"""The contract every model in the registry passes; a model dropped into models/ is tested here unedited."""
import argparse
import io

import pytest
import torch

import models
import run
from utils.args import parse_args

TINY = ["--seq_len", "32", "--input_token_len", "8", "--output_token_len", "8", "--d_model", "16", "--d_ff", "16",
        "--n_heads", "2", "--e_layers", "1", "--dropout", "0", "--patch_len", "8", "--stride", "4",
        "--top_k", "2", "--num_kernels", "2", "--down_sampling_layers", "2", "--ap_levels", "2", "--d_layers", "1"]
N_MARKS = 4


def modes(name):
    """(nonautoregressive, covariate) pairs the model declares."""
    caps = models.capabilities(name)
    found = [(True, False)] if caps.direct else []
    if caps.autoregressive:
        found.append((False, False))
    if caps.covariate:
        found.append((not caps.autoregressive, True))
    return found


def build(name, channels, nonautoregressive, covariate=False, extra=()):
    args = parse_args(TINY + ["--model", name] + (["--nonautoregressive"] if nonautoregressive else [])
                      + (["--covariate"] if covariate else []) + list(extra))
    config = argparse.Namespace(**vars(args), enc_in=channels, n_marks=N_MARKS)
    torch.manual_seed(0)
    return models.build(name, config), args


def inputs(name, batch, channels):
    x = torch.randn(batch, 32, channels)
    marks = torch.rand(batch, 32, N_MARKS) - 0.5 if models.capabilities(name).time_marks else None
    return x, marks


CASES = [(name, nar, cov) for name in sorted(models.MODELS) for nar, cov in modes(name)]


def test_registry_holds_the_eight_models():
    assert set(models.MODELS) >= {"dlinear", "timer_xl", "patchtst", "itransformer", "timesnet", "timemixer",
                                  "timer", "ttm"}
    assert models.resolve("Timer-XL") == "timer_xl" and models.resolve("DLinear") == "dlinear"


@pytest.mark.parametrize("name,nonautoregressive,covariate", CASES)
@pytest.mark.parametrize("channels", [1, 3])
def test_forward_shape(name, nonautoregressive, covariate, channels):
    model, args = build(name, channels, nonautoregressive, covariate)
    x, marks = inputs(name, 4, channels)
    out = model(x, marks)
    per_token = models.capabilities(name).token_input  # one output token per input token, in every mode
    length = args.seq_len // args.input_token_len * args.output_token_len if per_token else args.output_token_len
    assert out.shape == (4, length, channels) and torch.isfinite(out).all()


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_two_optimizer_steps_lower_the_loss(name):
    nonautoregressive = models.capabilities(name).direct
    model, args = build(name, 3, nonautoregressive)
    x, marks = inputs(name, 16, 3)
    target = torch.randn_like(model(x, marks))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(3):
        loss = torch.nn.functional.mse_loss(model(x, marks), target)
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert losses[2] < losses[0]


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_state_dict_round_trip_gives_identical_outputs(name):
    nonautoregressive = models.capabilities(name).direct
    model, _ = build(name, 3, nonautoregressive)
    model.train()
    x, marks = inputs(name, 8, 3)
    model(x, marks)  # move BatchNorm running statistics away from their initial values
    model.eval()
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    torch.manual_seed(123)  # a different initialisation, overwritten by the load
    fresh, _ = build(name, 3, nonautoregressive)
    fresh.load_state_dict(torch.load(buffer, weights_only=True), strict=True)
    fresh.eval()
    with torch.no_grad():
        assert torch.equal(model(x, marks), fresh(x, marks))


@pytest.mark.parametrize("name", sorted(models.MODELS))
def test_end_to_end_run(name, tiny_args):
    extra = [] if models.capabilities(name).autoregressive else ["--nonautoregressive"]
    small = ["--train_epochs", "1", "--patch_len", "8", "--stride", "4", "--top_k", "2", "--num_kernels", "2",
             "--down_sampling_layers", "2", "--ap_levels", "2", "--d_layers", "1"]
    metrics = run.main(tiny_args + ["--model", name] + extra + small)[0]["metrics"]
    assert metrics["n_test_windows"] == 105 and torch.isfinite(torch.tensor(metrics["mse"]))


@pytest.mark.parametrize("name", [n for n in sorted(models.MODELS) if not models.capabilities(n).covariate])
def test_covariate_mode_is_refused_by_channel_independent_models(name, tiny_args):
    from utils.errors import ConfigError
    with pytest.raises(ConfigError, match="channel-independent"):
        run.main(tiny_args + ["--model", name, "--nonautoregressive", "--covariate"])
