"""N-BEATS and N-HiTS against their official code.

N-BEATS: the official ElementAI/N-BEATS (commit 04f56c4, models/nbeats.py and experiments/model.py) is a
repository, not a package: its bases, blocks and forward are written out below as it computes them, and our models
must equal them. Its bases are also checked against neuralforecast's NBEATS bases, which compute the same matrices.
N-HiTS: neuralforecast's algorithm written out the same way, and, where neuralforecast is installed, its own
NHITS modules (neuralforecast/models/nhits.py loaded by itself, without the package's Lightning machinery).
"""
import importlib.util
import math
import os
import sys
import types
from unittest import mock

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import models
from models.nhits import interpolate

TASK = {"seq_len": 32, "input_token_len": 8, "output_token_len": 8, "enc_in": 1, "n_marks": 0, "covariate": False}
TINY_NBEATS = {"stacks": 3, "layers": 2, "layer_size": 16, "trend_blocks": 3, "trend_layers": 2, "trend_layer_size": 16,
               "degree_of_polynomial": 2, "seasonality_blocks": 3, "seasonality_layers": 2,
               "seasonality_layer_size": 16, "harmonics": 1, "use_norm": False}
TINY_NHITS = {"n_blocks": "1,2,1", "mlp_units": "16,16,16", "n_pool_kernel_size": "4,2,1", "n_freq_downsample": "4,2,1",
              "pooling_mode": "max", "interpolation_mode": "linear", "dropout": 0.0, "activation": "relu",
              "use_norm": False, "first_activation": False}


def build(name, hparams, seed=0, **task):
    torch.manual_seed(seed)
    return models.build(name, {**TASK, **task}, hparams).eval()


def nbeats(architecture, seed=0, **task):
    return build("nbeats", {**TINY_NBEATS, "architecture": architecture}, seed, **task)


def nhits(seed=0, n_outputs=1, **hparams):
    return build("nhits", {**TINY_NHITS, **hparams}, seed, n_outputs=n_outputs)


def series(n=5, length=TASK["seq_len"], seed=1):
    return torch.randn(n, length, generator=torch.Generator().manual_seed(seed)) + 3


# ---- the official N-BEATS, written out (ElementAI/N-BEATS models/nbeats.py) ----

def official_trend_templates(degree, backcast, forecast):
    """TrendBasis: rows (t / size)^i, i = 0..degree, in float64 (np.float), stored as float32."""
    grid = lambda size: np.concatenate([np.power(np.arange(size, dtype=np.float64) / size, i)[None, :]  # noqa: E731
                                        for i in range(degree + 1)])
    return torch.tensor(grid(backcast), dtype=torch.float32), torch.tensor(grid(forecast), dtype=torch.float32)


def official_seasonality_templates(harmonics, backcast, forecast, dtype=np.float64):
    """SeasonalityBasis: backcast cos, backcast sin, forecast cos, forecast sin; the official code computes in
    float32 (dtype np.float32), ours in float64."""
    frequency = np.append(np.zeros(1, dtype=dtype),
                          np.arange(harmonics, harmonics / 2 * forecast, dtype=dtype) / harmonics)[None, :]
    back_grid = -2 * np.pi * (np.arange(backcast, dtype=dtype)[:, None] / forecast) * frequency
    fore_grid = 2 * np.pi * (np.arange(forecast, dtype=dtype)[:, None] / forecast) * frequency
    return [torch.tensor(np.transpose(f(g)), dtype=torch.float32)
            for g in (back_grid, fore_grid) for f in (np.cos, np.sin)]


def official_basis(kind, theta, L, H, degree=2, harmonics=1):
    """(backcast, forecast) of the official GenericBasis / TrendBasis / SeasonalityBasis for theta."""
    if kind == "generic":
        return theta[:, :L], theta[:, -H:]
    if kind == "trend":
        back, fore = official_trend_templates(degree, L, H)
        p = degree + 1
        return theta[:, p:] @ back, theta[:, :p] @ fore
    back_cos, back_sin, fore_cos, fore_sin = official_seasonality_templates(harmonics, L, H)
    n = theta.shape[1] // 4
    return (theta[:, 2 * n:3 * n] @ back_cos + theta[:, 3 * n:] @ back_sin,
            theta[:, :n] @ fore_cos + theta[:, n:2 * n] @ fore_sin)


def official_nbeats(blocks, x, input_mask):
    """NBeats.forward; blocks: (linear layers, theta layer, basis kind) in order, a shared block repeated."""
    residuals, input_mask, forecast = x.flip(dims=(1,)), input_mask.flip(dims=(1,)), x[:, -1:]
    for layers, theta_layer, kind in blocks:
        h = residuals
        for layer in layers:
            h = torch.relu(layer(h))
        backcast, block_forecast = official_basis(kind, theta_layer(h), x.shape[1], TASK["output_token_len"])
        residuals = (residuals - backcast) * input_mask
        forecast = forecast + block_forecast
    return forecast


def official_blocks(model, architecture):
    """Our model's layers in the official NBeats' block list (experiments/model.py)."""
    if architecture == "generic":
        return [(block.layers, block.theta, "generic") for block in model.stacks]
    trend, seasonality = model.stacks
    return ([(trend.layers, trend.theta, "trend")] * TINY_NBEATS["trend_blocks"]
            + [(seasonality.layers, seasonality.theta, "seasonality")] * TINY_NBEATS["seasonality_blocks"])


@pytest.mark.parametrize("architecture", ["generic", "interpretable"])
def test_nbeats_is_the_official_nbeats_with_an_all_ones_mask(architecture):
    model, x = nbeats(architecture), series()
    with torch.no_grad():
        expected = official_nbeats(official_blocks(model, architecture), x, torch.ones_like(x))
        torch.testing.assert_close(model.forecast(x)[..., 0], expected)
        # the framework's (batch, time, channels): every channel the same model on its own series
        windows = torch.stack([x, 2 * x.flip(0)], dim=-1)
        out = model(windows)
    assert out.shape == (5, TASK["output_token_len"], 2)
    torch.testing.assert_close(out[..., 0], expected)
    torch.testing.assert_close(out[..., 1], model.forecast(2 * x.flip(0))[..., 0])


@pytest.mark.parametrize("architecture", ["generic", "interpretable"])
def test_nbeats_layers_are_the_official_layers_drawn_in_the_official_order(architecture):
    """The official NBeatsBlock's linear layers (input, layers - 1 hidden, theta of the official theta_size), made
    in the official order: the same seed gives the same initial weights; one block per stack when weights are
    shared (experiments/model.py repeats one block)."""
    L, H = TASK["seq_len"], TASK["output_token_len"]
    harmonics, degree = TINY_NBEATS["harmonics"], TINY_NBEATS["degree_of_polynomial"]
    if architecture == "generic":
        shapes = [(TINY_NBEATS["layers"], TINY_NBEATS["layer_size"], L + H)] * TINY_NBEATS["stacks"]
    else:
        shapes = [(TINY_NBEATS["trend_layers"], TINY_NBEATS["trend_layer_size"], 2 * (degree + 1)),
                  (TINY_NBEATS["seasonality_layers"], TINY_NBEATS["seasonality_layer_size"],
                   4 * int(np.ceil(harmonics / 2 * H) - (harmonics - 1)))]
    torch.manual_seed(0)
    official = [nn.ModuleList([nn.Linear(L, size)] + [nn.Linear(size, size) for _ in range(layers - 1)]
                              + [nn.Linear(size, theta)]) for layers, size, theta in shapes]
    ours = list(nbeats(architecture).parameters())
    theirs = [p for block in official for p in block.parameters()]
    assert [p.shape for p in ours] == [p.shape for p in theirs]
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))


def test_nbeats_bases_are_the_official_bases():
    for L, H, degree, harmonics in [(32, 8, 2, 1), (21, 7, 3, 3), (720, 720, 2, 2), (5, 1, 2, 1)]:
        model = build("nbeats", {**TINY_NBEATS, "architecture": "interpretable", "degree_of_polynomial": degree,
                                 "harmonics": harmonics}, seq_len=L, output_token_len=H)
        trend, seasonality = model.stacks[0].basis, model.stacks[1].basis
        back, fore = official_trend_templates(degree, L, H)
        torch.testing.assert_close(trend.backcast_basis, back, rtol=0, atol=1e-7)
        torch.testing.assert_close(trend.forecast_basis, fore, rtol=0, atol=1e-7)
        back_cos, back_sin, fore_cos, fore_sin = official_seasonality_templates(harmonics, L, H)
        assert seasonality.theta_size == 4 * int(np.ceil(harmonics / 2 * H) - (harmonics - 1))  # experiments/model.py
        torch.testing.assert_close(seasonality.backcast_basis, torch.cat([back_cos, back_sin]), rtol=0, atol=1e-6)
        torch.testing.assert_close(seasonality.forecast_basis, torch.cat([fore_cos, fore_sin]), rtol=0, atol=1e-6)
        # the official float32 phases: off by their rounding, up to an ulp of the largest phase (pi * L)
        official32 = torch.cat(official_seasonality_templates(harmonics, L, H, np.float32)[:2])
        ulp = np.spacing(np.float32(np.pi * L))
        torch.testing.assert_close(seasonality.backcast_basis, official32, rtol=0, atol=float(4 * ulp + 1e-6))


def test_the_interpretable_forecast_is_its_level_trend_and_seasonality_and_the_trend_a_quadratic():
    model, x = nbeats("interpretable"), series()
    with torch.no_grad():
        level, trend, seasonality = model.forecast(x, decompose=True)
        torch.testing.assert_close(level + trend + seasonality, model.forecast(x))
    assert torch.equal(level[:, 0, 0], x[:, -1])
    # the trend: a polynomial of degree <= 2 in time (a least-squares fit leaves nothing), not of degree 1
    t = torch.arange(TASK["output_token_len"], dtype=torch.float64) / TASK["output_token_len"]
    y = trend[..., 0].double().T

    def misfit(degree):
        design = t[:, None] ** torch.arange(degree + 1, dtype=torch.float64)
        return (design @ torch.linalg.lstsq(design, y).solution - y).abs().max().item()
    assert misfit(2) < 1e-5 * y.abs().max().item() < misfit(1)


def test_nbeats_k_outputs_are_k_forecasts_of_their_own_and_one_is_the_point_model():
    for architecture in ("generic", "interpretable"):
        point, one, wide = nbeats(architecture), nbeats(architecture, n_outputs=1), nbeats(architecture, n_outputs=3)
        x = torch.randn(2, TASK["seq_len"], 4)
        with torch.no_grad():
            assert torch.equal(point(x), one(x))
            out = wide(x)
        assert out.shape == (2, TASK["output_token_len"], 4, 3)
        assert not torch.equal(out[..., 0], out[..., 1])


def test_nbeats_paper_configurations_have_the_official_parameter_counts():
    """The M4 generic and interpretable models (generic.gin, interpretable.gin) for M4 Yearly, horizon 6 and a
    window of 5 horizons: the counts of the official blocks, a shared block counted once."""
    L, H = 30, 6
    linear = lambda i, o: i * o + o  # noqa: E731
    mlp = lambda layers, size, theta: linear(L, size) + (layers - 1) * linear(size, size) + linear(size, theta)  # noqa
    defaults = {f.name: f.default for f in models.hyperparameter_fields(models.model_class("nbeats"))}
    counts = {}
    for architecture in ("generic", "interpretable"):
        with torch.device("meta"):
            model = models.build("nbeats", {**TASK, "seq_len": L, "output_token_len": H},
                                 {**defaults, "architecture": architecture})
        counts[architecture] = sum(p.numel() for p in model.parameters())
    assert counts["generic"] == 30 * mlp(4, 512, L + H) == 24_669_240
    assert counts["interpretable"] == mlp(4, 256, 2 * 3) + mlp(4, 2048, 4 * math.ceil(H / 2)) == 12_883_986


# ---- N-HiTS: neuralforecast's algorithm written out (neuralforecast/models/nhits.py, 3.3.0) ----

def reference_nhits(model, x, kernels, pooling="max", interpolation="linear", n_outputs=1):
    """NHITS.forward with NHITSBlock and _IdentityBasis: flip, mask, naive level, pool (ceil_mode), MLP, knots
    (k, n) interpolated by F.interpolate (cubic: bicubic of a (1, n) image to (H, H), its first row)."""
    L, H = x.shape[1], TASK["output_token_len"]
    pool = nn.MaxPool1d if pooling == "max" else nn.AvgPool1d
    residuals, mask, forecast = x.flip(dims=(-1,)), torch.ones_like(x).flip(dims=(-1,)), x[:, -1:, None]
    for block, kernel in zip(model.blocks, kernels):
        theta = block.layers(pool(kernel_size=kernel, stride=kernel, ceil_mode=True)(residuals.unsqueeze(1))
                             .squeeze(1))
        backcast, knots = theta[:, :L], theta[:, L:].reshape(len(theta), n_outputs, -1)
        if interpolation == "cubic":
            block_forecast = F.interpolate(knots[:, None], size=H, mode="bicubic")[:, 0, 0, :][:, None, :]
        else:
            block_forecast = F.interpolate(knots, size=H, mode=interpolation)
        residuals = (residuals - backcast) * mask
        forecast = forecast + block_forecast.permute(0, 2, 1)
    return forecast


@pytest.mark.parametrize("pooling,interpolation", [("max", "linear"), ("average", "nearest"), ("max", "cubic")])
def test_nhits_is_neuralforecasts_algorithm(pooling, interpolation):
    model = nhits(pooling_mode=pooling, interpolation_mode=interpolation)
    x, kernels = series(), [4, 2, 2, 1]  # n_blocks 1,2,1 with n_pool_kernel_size 4,2,1
    with torch.no_grad():
        expected = reference_nhits(model, x, kernels, pooling, interpolation)
        torch.testing.assert_close(model.forecast(x), expected)
        torch.testing.assert_close(model(x[..., None])[..., 0], expected[..., 0])


def test_nhits_block_is_neuralforecasts_mlp_with_floor_knots():
    """neuralforecast's block: Linear(pooled window, w0) without activation, then Linear + activation per next width,
    then theta of seq_len + max(horizon // n_freq_downsample, 1); n_freq_downsample 1: theta's forecast part is the
    horizon itself (interpolation to its own length changes nothing)."""
    L, H = TASK["seq_len"], TASK["output_token_len"]
    model = nhits(n_blocks="1,1,1", n_pool_kernel_size="3,2,1", n_freq_downsample="16,3,1")
    kinds = [type(m).__name__ for m in model.blocks[0].layers]
    assert kinds == ["Linear", "Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert [b.layers[0].in_features for b in model.blocks] == [math.ceil(L / 3), L // 2, L]
    assert [b.layers[-1].out_features - L for b in model.blocks] == [1, H // 3, H]
    last, x = model.blocks[-1], series()
    with torch.no_grad():
        backcast, forecast = last(x)
        theta = last.layers(x)
    assert torch.equal(backcast, theta[:, :L]) and torch.equal(forecast[..., 0], theta[:, L:])
    with torch.no_grad():  # one knot: a constant forecast
        assert torch.equal(model.blocks[0](x)[1], model.blocks[0](x)[1][:, :1].expand(-1, H, -1))


def test_nhits_first_activation_is_the_papers_mlp():
    """cchallu/n-hits' _NHITSBlock (src/models/nhits/nhits.py, d882ee6): every hidden layer Linear + activation,
    n_layers 2 of n_hidden 512 there, mlp_units "512,512" here; the rest of the forward as neuralforecast's."""
    model = nhits(n_blocks="1,1,1", mlp_units="16,16", first_activation=True)
    assert [type(m).__name__ for m in model.blocks[0].layers] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    x, block = series(), model.blocks[0]
    pooled = nn.MaxPool1d(kernel_size=4, stride=4, ceil_mode=True)(x.unsqueeze(1)).squeeze(1)
    first, _, second, _, out = block.layers
    with torch.no_grad():
        theta = out(torch.relu(second(torch.relu(first(pooled)))))
        torch.testing.assert_close(block(x)[0], theta[:, :x.shape[1]])
        torch.testing.assert_close(model.forecast(x), reference_nhits(model, x, [4, 2, 1]))


def test_nhits_k_outputs_interpolate_k_sets_of_knots():
    model, x = nhits(n_outputs=3), series()
    with torch.no_grad():
        torch.testing.assert_close(model.forecast(x), reference_nhits(model, x, [4, 2, 2, 1], n_outputs=3))
        cubic = nhits(n_outputs=3, interpolation_mode="cubic")
        knots = torch.randn(4, 3, 5)
        # each output's knots on their own: the one-output cubic interpolation of each
        for j in range(3):
            torch.testing.assert_close(interpolate(knots, 8, "cubic")[:, j],
                                       F.interpolate(knots[:, j][:, None, None], size=8, mode="bicubic")[:, 0, 0])
        assert cubic.forecast(x).shape == (5, 8, 3)


def test_nhits_refuses_inconsistent_lists():
    for bad in ({"n_blocks": "1,1"}, {"n_freq_downsample": "4,x,1"}, {"mlp_units": "16"},
                {"n_pool_kernel_size": "2,0,1"}):
        with pytest.raises(ValueError):
            nhits(**bad)


def test_nhits_default_parameter_counts():
    """neuralforecast's default NHITS at horizon 96 and a window of 5 horizons (the paper's long-horizon window)."""
    L, H = 480, 96
    linear = lambda i, o: i * o + o  # noqa: E731
    expected = sum(linear(math.ceil(L / kernel), 512) + 3 * linear(512, 512) + linear(512, L + H // rate)
                   for kernel, rate in [(2, 4), (2, 2), (1, 1)])
    defaults = {f.name: f.default for f in models.hyperparameter_fields(models.model_class("nhits"))}
    with torch.device("meta"):
        model = models.build("nhits", {**TASK, "seq_len": L, "output_token_len": H}, defaults)
    assert sum(p.numel() for p in model.parameters()) == expected == 3_681_864


# ---- against neuralforecast's own modules, where it is installed ----

@pytest.fixture(scope="module")
def neuralforecast():
    """neuralforecast's models/nhits.py and nbeats.py, each loaded by itself with stand-ins for the two names it
    takes from the package (BaseModel, MAE), so that the package's Lightning machinery is not imported: its
    NHITSBlock, _IdentityBasis, create_stack and forward are the package's own code."""
    spec = importlib.util.find_spec("neuralforecast")
    if spec is None:
        pytest.skip("neuralforecast is not installed")
    stubs = {name: types.ModuleType(name) for name in
             ("_nf", "_nf.common", "_nf.common._base_model", "_nf.losses", "_nf.losses.pytorch", "_nf.models")}
    for name in ("_nf", "_nf.common", "_nf.losses", "_nf.models"):
        stubs[name].__path__ = []
    stubs["_nf.common._base_model"].BaseModel = nn.Module
    stubs["_nf.losses.pytorch"].MAE = object
    loaded = {}
    with mock.patch.dict(sys.modules, stubs):
        for module in ("nhits", "nbeats"):
            path = os.path.join(spec.submodule_search_locations[0], "models", f"{module}.py")
            module_spec = importlib.util.spec_from_file_location(f"_nf.models.{module}", path)
            loaded[module] = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(loaded[module])
    return types.SimpleNamespace(**loaded)


def neuralforecast_nhits(nf, n_outputs, pooling, interpolation):
    """neuralforecast's blocks for TINY_NHITS (mlp_units 16,16,16 is [[16, 16], [16, 16]])."""
    fake = types.SimpleNamespace(loss=types.SimpleNamespace(outputsize_multiplier=n_outputs))
    return nn.ModuleList(nf.nhits.NHITS.create_stack(
        fake, h=TASK["output_token_len"], input_size=TASK["seq_len"], stack_types=["identity"] * 3, n_blocks=[1, 2, 1],
        mlp_units=[[16, 16], [16, 16]], n_pool_kernel_size=[4, 2, 1], n_freq_downsample=[4, 2, 1],
        pooling_mode={"max": "MaxPool1d", "average": "AvgPool1d"}[pooling], interpolation_mode=interpolation,
        dropout_prob_theta=0.0, activation="ReLU", futr_input_size=0, hist_input_size=0, stat_input_size=0))


@pytest.mark.parametrize("pooling,interpolation,n_outputs",
                         [("max", "linear", 1), ("average", "nearest", 1), ("max", "cubic", 1), ("max", "linear", 3)])
def test_nhits_equals_neuralforecasts_nhits(neuralforecast, pooling, interpolation, n_outputs):
    """The same seed draws the same initial weights (the layers are made in neuralforecast's order); with them,
    the forecasts of neuralforecast's NHITS.forward (all-ones mask, no exogenous inputs) and ours agree."""
    torch.manual_seed(0)
    theirs = neuralforecast_nhits(neuralforecast, n_outputs, pooling, interpolation).eval()
    ours = nhits(n_outputs=n_outputs, pooling_mode=pooling, interpolation_mode=interpolation)
    ours_state, their_state = ours.blocks.state_dict(), theirs.state_dict()
    assert list(ours_state) == list(their_state)
    assert all(torch.equal(ours_state[k], their_state[k]) for k in ours_state)
    x = series()
    batch = {"insample_y": x[..., None], "insample_mask": torch.ones_like(x)[..., None], "futr_exog": None,
             "hist_exog": None, "stat_exog": None}
    fake = types.SimpleNamespace(blocks=theirs, h=TASK["output_token_len"], decompose_forecast=False)
    with torch.no_grad():
        torch.testing.assert_close(ours.forecast(x), neuralforecast.nhits.NHITS.forward(fake, batch))


def test_nbeats_bases_are_neuralforecasts_bases(neuralforecast):
    """neuralforecast's NBEATS computes the official trend and seasonality matrices (in float64, as ours); its
    blocks differ from the official ones (first layer without activation, theta backcast-first), so only the bases
    are compared."""
    for L, H, degree, harmonics in [(32, 8, 2, 1), (21, 7, 3, 3), (720, 720, 2, 2)]:
        model = build("nbeats", {**TINY_NBEATS, "architecture": "interpretable", "degree_of_polynomial": degree,
                                 "harmonics": harmonics}, seq_len=L, output_token_len=H)
        trend = neuralforecast.nbeats.TrendBasis(n_basis=degree, backcast_size=L, forecast_size=H)
        seasonality = neuralforecast.nbeats.SeasonalityBasis(harmonics=harmonics, backcast_size=L, forecast_size=H)
        ours_trend, ours_seasonality = model.stacks[0].basis, model.stacks[1].basis
        torch.testing.assert_close(ours_trend.backcast_basis, trend.backcast_basis, rtol=0, atol=1e-7)
        torch.testing.assert_close(ours_trend.forecast_basis, trend.forecast_basis, rtol=0, atol=1e-7)
        torch.testing.assert_close(ours_seasonality.backcast_basis, seasonality.backcast_basis, rtol=0, atol=1e-6)
        torch.testing.assert_close(ours_seasonality.forecast_basis, seasonality.forecast_basis, rtol=0, atol=1e-6)
