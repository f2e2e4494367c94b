"""The loss registry (utils/losses/) and --loss: a flag added after runs were recorded, chosen by name, read by
training and validation alike."""
import pytest
import torch
import torch.nn.functional as F

from exp.config import parse_args, resolve
from exp.identity import make_identity
from tests.unit.test_identity import DLINEAR, _Data
from utils import losses
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
    with pytest.raises(ConfigError, match=r"argument --loss: invalid choice: .not_a_loss. \(choose from .mae., .mse.\)"):
        parse_args([*DLINEAR, "--loss", "not_a_loss"])


def test_a_dialects_loss_is_ours_lower_cased_or_refused_in_one_line():
    tslib = ["--task_name", "long_term_forecast", "--model", "DLinear", "--data", "custom", "--pred_len", "8"]
    assert resolve(parse_args([*tslib, "--loss", "MSE"])).loss == "mse"
    assert resolve(parse_args([*tslib, "--loss", "MAE"])).loss == "mae"
    with pytest.raises(ConfigError, match=r"--loss MAPE: the losses here are mae, mse \(add one as a file"):
        parse_args([*tslib, "--loss", "MAPE"])
