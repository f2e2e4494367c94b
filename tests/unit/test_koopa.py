"""Koopa's own pieces: the Fourier filter, the frequency statistic, DMD (the contract test covers the model)."""
import pytest
import torch

import models
from models.koopa import dominant_frequencies, one_step_operator


def build(seq_len=24, horizon=8, **hparams):
    task = {"seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon, "enc_in": 2, "n_marks": 0,
            "covariate": False, "nonautoregressive": True}
    defaults = {f.name: f.default for f in models.hyperparameter_fields(models.model_class("koopa"))}
    return models.build("koopa", task, {**defaults, "dynamic_dim": 8, "hidden_dim": 8, "num_blocks": 1, **hparams})


@pytest.mark.parametrize("seq_len", [24, 25])
def test_the_filter_splits_the_window_into_the_masked_frequencies_and_the_rest(seq_len):
    model = build(seq_len, alpha=0.1)  # int(0.1 x (seq_len // 2 + 1)) = 1 frequency
    t = torch.arange(seq_len)[None, :, None]
    model.fit_training_windows([torch.cos(2 * torch.pi * 2 * t / seq_len).expand(4, -1, 2)])  # a cycle: bin 2
    assert (model.variant_frequencies == 0).nonzero().flatten().tolist() == [2]
    model.variant_frequencies[0] = 0  # bins 0 and 2 time-invariant
    x = torch.randn(3, seq_len, 2)
    variant, invariant = model.split(x)
    torch.testing.assert_close(variant + invariant, x)
    spectrum = torch.fft.rfft(invariant, dim=1).abs().amax(dim=(0, 2))
    others = [f for f in range(seq_len // 2 + 1) if f not in (0, 2)]
    assert spectrum[others].max() < 1e-5 and spectrum[[0, 2]].min() > 0.1


def test_dominant_frequencies_find_the_cycles_of_the_training_windows():
    t = torch.arange(600.0)[:, None]
    series = torch.sin(2 * torch.pi * t / 12) + 0.5 * torch.cos(2 * torch.pi * t / 8) + 0.05 * torch.randn(600, 3)
    windows = series.unfold(0, 48, 1).transpose(1, 2)  # (N, 48, 3): cycles of 12 and 8 steps are rfft bins 4 and 6
    assert dominant_frequencies([windows], alpha=0.08) == [4, 6]  # int(0.08 x 25) = 2
    assert dominant_frequencies(windows.split(100), alpha=0.08) == [4, 6]  # in batches, the same sum


def test_dmd_recovers_a_linear_system():
    torch.manual_seed(0)
    A = torch.linalg.qr(torch.randn(4, 4))[0]
    z = [torch.randn(3, 1, 4)]
    for _ in range(9):
        z.append(z[-1] @ A)
    torch.testing.assert_close(one_step_operator(torch.cat(z, dim=1)), A.expand(3, 4, 4), rtol=1e-4, atol=1e-4)


def test_run_py_builds_the_model_with_the_dominant_frequencies_of_its_training_windows_and_a_checkpoint_keeps_them(
        tiny_args, tmp_path):
    import run
    from data_provider.factory import build_data
    from exp.config import parse_args, resolve
    args = resolve(parse_args(tiny_args + ["--model", "koopa", "--nonautoregressive", "--seq_len", "32",
                                           "--dynamic_dim", "8", "--hidden_dim", "8"]))
    data = build_data(args, torch.device("cpu"), True, False)
    train = data.datasets["train"]
    expected = dominant_frequencies([train.gather(torch.arange(len(train))).x])
    model = run.build_model(args, data)
    assert sorted((model.variant_frequencies == 0).nonzero().flatten().tolist()) == sorted(expected)
    assert len(expected) == int(0.2 * (32 // 2 + 1)) and "variant_frequencies" in model.state_dict()


@pytest.mark.parametrize("seg_len, horizon", [(4, 8), (6, 32)])  # the horizon's segments within / beyond the window's
def test_multistep_forecasts_every_point_of_the_horizon(seg_len, horizon):
    model = build(horizon=horizon, seg_len=seg_len, multistep=True).eval()
    out = model(torch.randn(2, 24, 2))
    assert out.shape == (2, horizon, 2) and torch.isfinite(out).all()


def test_the_window_must_hold_two_segments():
    with pytest.raises(ValueError, match="must exceed seg_len"):
        build(seq_len=8, horizon=8)
