"""The loss registry (utils/losses/) and --loss: a flag added after runs were recorded, chosen by name, read by
training and validation alike."""
import math

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
    with pytest.raises(ConfigError, match=r"argument --loss: invalid choice: .not_a_loss. \(choose from .gaussian"):
        parse_args([*DLINEAR, "--loss", "not_a_loss"])


def test_a_dialects_loss_is_ours_lower_cased_or_refused_in_one_line():
    tslib = ["--task_name", "long_term_forecast", "--model", "DLinear", "--data", "custom", "--pred_len", "8"]
    assert resolve(parse_args([*tslib, "--loss", "MSE"])).loss == "mse"
    assert resolve(parse_args([*tslib, "--loss", "MAE"])).loss == "mae"
    with pytest.raises(ConfigError, match=r"--loss MAPE: the losses here are gaussian, huber, mae, mixture, mse, "
                                          r"quantile, student_t \(add"):
        parse_args([*tslib, "--loss", "MAPE"])


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
