"""The loss registry (utils/losses/) and --loss: a flag added after runs were recorded, chosen by name, read by
training and validation alike."""
import math

import numpy as np
import properscoring
import pytest
import torch
import torch.distributions as D
import torch.nn.functional as F
from scipy import stats

from exp.config import parse_args, resolve
from exp.identity import make_identity
from tests.unit.test_identity import DLINEAR, _Data
from utils import losses, metrics
from utils.errors import ConfigError


def _identity(*flags):
    config = resolve(parse_args([*DLINEAR, *flags]))
    return make_identity(config, _Data, 1, config.seed)


def test_the_losses_are_torchs_and_mse_is_the_default():
    pred, true = torch.randn(4, 8, 3), torch.randn(4, 8, 3)
    assert torch.equal(losses.get("mse")(pred, true), F.mse_loss(pred, true))
    assert torch.equal(losses.get("mae")(pred, true), (pred - true).abs().mean())
    assert resolve(parse_args(DLINEAR)).loss == "mse"


def test_the_default_loss_named_keeps_the_identity_and_the_flag_takes_only_registered_losses():
    assert _identity("--loss", "mse").config_id == _identity().config_id
    with pytest.raises(ConfigError, match=r"argument --loss: invalid choice: .not_a_loss. \(choose from .arctan_mae., .gaussian"):
        parse_args([*DLINEAR, "--loss", "not_a_loss"])


def test_a_dialects_loss_is_ours_lower_cased_or_refused_in_one_line():
    tslib = ["--task_name", "long_term_forecast", "--model", "DLinear", "--data", "custom", "--pred_len", "8"]
    assert resolve(parse_args([*tslib, "--loss", "MSE"])).loss == "mse"
    assert resolve(parse_args([*tslib, "--loss", "MAE"])).loss == "mae"
    assert resolve(parse_args([*tslib, "--loss", "SMAPE"])).loss == "smape"
    with pytest.raises(ConfigError, match=r"--loss DTW: the losses here are arctan_mae, gaussian, huber, mae, mape, "
                                          r"mase, mixture, mse, quantile, smape, student_t \(add"):
        parse_args([*tslib, "--loss", "DTW"])


LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def _levels(*q):
    return torch.tensor(q, dtype=torch.float64)


def test_huber_and_pinball_are_their_closed_forms():
    pred, true = torch.randn(64, 8, 2, dtype=torch.float64), torch.randn(64, 8, 2, dtype=torch.float64) * 2
    e = (pred - true).abs()
    assert losses.get("huber")(pred, true) == pytest.approx(torch.where(e < 1, 0.5 * e ** 2, e - 0.5).mean().item())
    quantile = losses.objective("quantile", (0.1, 0.5, 0.9))
    out = torch.randn(64, 8, 2, 3, dtype=torch.float64)
    by_hand = sum(torch.where(true >= out[..., i], q * (true - out[..., i]), (1 - q) * (out[..., i] - true)).mean()
                  for i, q in enumerate((0.1, 0.5, 0.9))) / 3
    assert quantile(out, true).item() == pytest.approx(by_hand.item())
    assert quantile.outputs == 3 and torch.equal(quantile.point(out), out.sort(-1).values[..., 1])


def test_the_likelihoods_are_torchs_distributions_and_their_quantiles_invert_the_cdf():
    torch.manual_seed(0)
    true = torch.randn(32, 4, 2, dtype=torch.float64)
    levels = _levels(0.05, 0.3, 0.5, 0.95)
    gaussian = losses.objective("gaussian", LEVELS)
    out = torch.randn(32, 4, 2, 2, dtype=torch.float64)
    normal = D.Normal(out[..., 0], F.softplus(out[..., 1] - out[..., 0]) + losses.SCALE_FLOOR)
    assert gaussian(out, true).item() == pytest.approx(-normal.log_prob(true).mean().item())
    expected = normal.icdf(levels[:, None, None, None]).permute(1, 2, 3, 0)
    assert torch.allclose(gaussian.quantiles(out, levels), expected)
    student = losses.objective("student_t", LEVELS)
    out = torch.randn(32, 4, 2, 3, dtype=torch.float64)
    loc, scale = out[..., 0], F.softplus(out[..., 1] - out[..., 0]) + losses.SCALE_FLOOR
    df = 2 + F.softplus(out[..., 2] - out[..., 0]) + losses.SCALE_FLOOR
    t = D.StudentT(df, loc, scale)
    assert student(out, true).item() == pytest.approx(-t.log_prob(true).mean().item())
    expected = loc[..., None] + scale[..., None] * torch.as_tensor(stats.t.ppf(levels.numpy(), df.numpy()[..., None]))
    assert torch.allclose(student.quantiles(out, levels), expected)
    mixture = losses.objective("mixture", LEVELS)
    out = torch.randn(32, 4, 2, 9, dtype=torch.float64) * 2
    loc = out[..., :3]
    mix = D.MixtureSameFamily(D.Categorical(logits=out[..., 6:] - loc),
                              D.Normal(loc, F.softplus(out[..., 3:6] - loc) + losses.SCALE_FLOOR))
    assert mixture(out, true).item() == pytest.approx(-mix.log_prob(true).mean().item())
    assert torch.allclose(mixture.point(out), mix.mean)
    found = mixture.quantiles(out, levels)
    assert torch.allclose(mix.cdf(found.permute(3, 0, 1, 2)), levels[:, None, None, None], atol=1e-9)


def test_quantiles_between_the_levels_are_interpolated_and_beyond_them_unknown():
    out = torch.tensor([[[[3.0, 1.0, 2.0]]]], dtype=torch.float64)  # crossing quantiles are sorted
    q = losses.objective("quantile", (0.1, 0.5, 0.9)).quantiles(out, _levels(0.05, 0.1, 0.3, 0.5, 0.7, 0.95))
    assert q[0, 0, 0, 1:5].tolist() == [1.0, 1.5, 2.0, 2.5] and q[0, 0, 0, [0, 5]].isnan().all()


def test_crps_on_the_grid_is_the_mae_of_a_point_forecast_and_approaches_the_gaussians_closed_form():
    pred, true = torch.randn(50, 6, 3, dtype=torch.float64), torch.randn(50, 6, 3, dtype=torch.float64)
    found = dict(zip(metrics.names(), metrics.window_errors(pred, true).mean(0).tolist()))
    assert found["crps"] == pytest.approx(found["mae"], rel=1e-12)
    assert found["width_80"] == 0 and found["coverage_80"] == 0  # a point mass: an interval of no width
    fine = tuple(i / 1000 for i in range(1, 1000))
    out = torch.randn(50, 6, 3, 2, dtype=torch.float64)
    forecast = losses.objective("gaussian", fine).forecast(out)
    found = dict(zip(metrics.names(), metrics.window_errors(forecast, true).mean(0).tolist()))
    mu, sigma = out[..., 0], F.softplus(out[..., 1] - out[..., 0]) + losses.SCALE_FLOOR
    z = (true - mu) / sigma
    std_normal = D.Normal(0, 1)
    closed = sigma * (z * (2 * std_normal.cdf(z) - 1) + 2 * std_normal.log_prob(z).exp() - 1 / math.sqrt(math.pi))
    assert found["crps"] == pytest.approx(closed.mean().item(), rel=5e-3)
    assert found["width_80"] == pytest.approx((2 * 1.2815515655446004 * sigma).mean().item(), rel=1e-9)


def _calibrated_gaussian(seed: int, windows: int) -> tuple:
    """(the gaussian objective, its raw outputs, its mean, targets drawn from the forecast distribution itself)."""
    torch.manual_seed(seed)
    out = torch.randn(windows, 24, 2, 2, dtype=torch.float64)
    mu, sigma = out[..., 0], F.softplus(out[..., 1] - out[..., 0]) + losses.SCALE_FLOOR
    return losses.objective("gaussian", LEVELS), out, mu, mu + sigma * torch.randn(mu.shape, dtype=torch.float64)


def test_a_calibrated_forecast_covers_its_intervals():
    """Targets drawn from the forecast distribution itself land in its central P% interval P% of the time."""
    gaussian, out, _, true = _calibrated_gaussian(1, 400)
    found = dict(zip(metrics.names(), metrics.window_errors(gaussian.forecast(out), true).mean(0).tolist()))
    for p in (50, 80, 90):
        assert found[f"coverage_{p}"] == pytest.approx(p / 100, abs=0.01)
    quantile = losses.objective("quantile", LEVELS)
    found = dict(zip(metrics.names(), metrics.window_errors(quantile.forecast(torch.randn(4, 8, 2, 9)),
                                                            torch.randn(4, 8, 2)).mean(0).tolist()))
    assert math.isnan(found["coverage_90"]) and math.isnan(found["width_90"]), "0.05 and 0.95 are off the grid"


@pytest.mark.parametrize("flags,message", [
    (["--quantiles", "0.1,1.2"], "--quantiles 0.1,1.2: each level must be in (0, 1)"),
    (["--quantiles", "0.9,0.1"], "--quantiles 0.9,0.1: give each level once, in increasing order"),
    (["--quantiles", "0.5,0.5"], "--quantiles 0.5,0.5: give each level once, in increasing order"),
    (["--quantiles", "0.1,half"], "argument --quantiles: expected comma-separated numbers, got '0.1,half'"),
])
def test_bad_quantile_levels_are_one_line(flags, message):
    with pytest.raises(ConfigError) as e:
        resolve(parse_args([*DLINEAR, "--loss", "quantile", *flags]))
    assert message in str(e.value)


def test_the_calibration_curve_of_a_calibrated_forecast_is_the_diagonal():
    gaussian, out, mu, true = _calibrated_gaussian(2, 300)
    shares = metrics.calibration(gaussian.forecast(out), true)
    summary = metrics.calibration_summary(shares, LEVELS)
    assert list(summary["calibration"]) == ["0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9"]
    assert summary["calibration"]["0.1"] == pytest.approx(0.1, abs=0.01) and summary["calibration_error"] < 0.01
    too_narrow = metrics.calibration_summary(metrics.calibration(gaussian.forecast(out), mu + 3 * (true - mu)),
                                             LEVELS)
    assert too_narrow["calibration"]["0.1"] > 0.2 and too_narrow["calibration_error"] > 0.05
    point = metrics.calibration(metrics.point_forecast(mu), true)
    assert torch.equal(point, (true <= mu).double().mean((1, 2))[:, None].expand(-1, 9))


# ---- samples (--num_samples) ------------------------------------------------------------------------------
def test_crps_of_samples_is_properscorings_ensemble_crps_and_approaches_the_gaussians_closed_form():
    samples, true = torch.randn(6, 5, 2, 40, dtype=torch.float64), torch.randn(6, 5, 2, dtype=torch.float64)
    forecast = metrics.sample_forecast(samples, LEVELS)
    found = metrics.window_errors(forecast, true)[:, metrics.names().index("crps_sample")]
    reference = properscoring.crps_ensemble(true.numpy(), samples.numpy()).mean(axis=(1, 2))
    assert found.numpy() == pytest.approx(reference, rel=1e-12)
    # many draws from a Gaussian forecast: its closed-form CRPS (properscoring's crps_gaussian)
    gaussian, out = losses.objective("gaussian", LEVELS), torch.randn(3, 4, 2, 2, dtype=torch.float64)
    draws = gaussian.draw(out, torch.rand(3, 4, 2, 20_000, dtype=torch.float64))
    mu, sigma = out[..., 0], F.softplus(out[..., 1] - out[..., 0]) + losses.SCALE_FLOOR
    closed = properscoring.crps_gaussian(true[:3, :4].numpy(), mu.numpy(), sigma.numpy())
    by_samples = metrics.window_errors(metrics.sample_forecast(draws, LEVELS), true[:3, :4])
    assert by_samples[:, metrics.names().index("crps_sample")].mean().item() == pytest.approx(closed.mean(), rel=0.01)


def test_a_sample_forecasts_point_is_the_mean_and_its_quantiles_are_numpys():
    samples = torch.randn(3, 4, 2, 25, dtype=torch.float64)
    forecast = metrics.sample_forecast(samples, LEVELS)
    levels = torch.tensor([0.025, 0.1, 0.5, 0.975], dtype=torch.float64)
    assert forecast.quantile(levels).numpy() == pytest.approx(
        np.moveaxis(np.quantile(samples.numpy(), levels.numpy(), axis=-1), 0, -1), rel=1e-12)
    assert torch.allclose(forecast.point, samples.mean(-1))
    point = dict(zip(metrics.names(), metrics.window_errors(torch.randn(4, 3, 2), torch.randn(4, 3, 2)).T))
    without = dict(zip(metrics.names(), metrics.window_errors(losses.objective("gaussian", LEVELS).forecast(
        torch.randn(4, 3, 2, 2)), torch.randn(4, 3, 2)).T))
    assert torch.equal(point["crps_sample"], point["mae"]), "a point mass's CRPS is its MAE"
    assert without["crps_sample"].isnan().all(), "a distribution not sampled has no samples to score"


@pytest.mark.parametrize("loss", ["gaussian", "student_t", "mixture"])
def test_draws_by_the_inverse_cdf_follow_the_distribution(loss):
    """Draws at uniforms (each point its own) are the distribution's quantiles there: their empirical quantiles
    match the exact ones."""
    objective = losses.objective(loss, LEVELS)
    out = torch.randn(2, 3, 1, objective.outputs, dtype=torch.float64)
    draws = objective.draw(out, torch.rand(2, 3, 1, 40_000, dtype=torch.float64))
    levels = torch.tensor(LEVELS, dtype=torch.float64)
    exact = objective.forecast(out).quantile(levels)
    found = torch.quantile(draws, levels, dim=-1).movedim(0, -1)
    assert torch.allclose(found, exact, atol=0.03 * (exact[..., -1] - exact[..., 0]).max().item())


def test_each_windows_uniforms_are_its_own_whoever_draws_them():
    from utils.seeding import window_uniforms
    together = window_uniforms(7, [0, 1, 2, 3], (5, 2, 8))
    apart = torch.cat([window_uniforms(7, [2, 3], (5, 2, 8)), window_uniforms(7, [0, 1], (5, 2, 8))])
    assert torch.equal(together, apart[[2, 3, 0, 1]])
    assert 0 < together.min() and together.max() < 1 and not torch.equal(together[0], together[1])
    assert not torch.equal(window_uniforms(8, [0], (5, 2, 8))[0], together[0]), "the seed keys the streams"


@pytest.mark.parametrize("flags,message", [
    (["--loss", "gaussian", "--num_samples", "0"], "--num_samples 0: draw at least 2 sample paths per window"),
    (["--loss", "quantile", "--num_samples", "100"],
     "--num_samples: --loss quantile forecasts quantiles, not a distribution to sample: its CRPS is computed from "
     "them (crps, on the --quantiles grid)"),
    (["--num_samples", "100"], "--num_samples: --loss mse forecasts a point, a point mass: its CRPS is its MAE"),
])
def test_samples_are_asked_only_of_a_distribution_in_one_line(flags, message):
    with pytest.raises(ConfigError) as e:
        resolve(parse_args([*DLINEAR, *flags]))
    assert message in str(e.value)


def test_tslibs_short_term_losses_and_their_division_by_zero():
    """TSLib's mape_loss, smape_loss and mase_loss (utils/losses.py there), a division by zero counted as 0."""
    pred = torch.tensor([[[2.0], [0.0], [3.0]]])
    true = torch.tensor([[[1.0], [0.0], [4.0]]])
    assert losses.get("mape")(pred, true).item() == pytest.approx((1 / 1 + 0 + 1 / 4) / 3)
    assert losses.get("smape")(pred, true).item() == pytest.approx(200 * (1 / 3 + 0 + 1 / 7) / 3)
    x = torch.tensor([[[1.0], [3.0], [2.0], [6.0]]])  # seasonal differences at m = 2: |2 - 1|, |6 - 3|
    mase = losses.objective("mase", LEVELS, season=2)
    assert mase(pred, true, x).item() == pytest.approx((1 + 0 + 1) / 2 / 3)
    assert losses.objective("mase", LEVELS, season=4)(pred, true, x).item() == pytest.approx(
        (1 + 0 + 1) / (7 / 3) / 3), "a season as long as the input: the naive forecast's scale"
    assert mase(pred, true, torch.ones(1, 4, 1)).item() == 0, "an input that does not change has no scale: 0"
    p = pred.clone().requires_grad_()
    losses.get("smape")(p, true).backward()  # the denominator is held constant: d/df 200|f - y| / (|f| + |y|) / n
    assert p.grad[0, 0, 0].item() == pytest.approx(200 / 3 / 3)
