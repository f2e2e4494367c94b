"""The contract every model in the registry passes; a model dropped into models/ is tested here unedited."""
import pytest
import torch

import models
import run
from exp.flags import hyperparameter_flags


def tiny_flags(name) -> list:
    """run.py flags setting every hyper-parameter of the model to its tiny value."""
    return hyperparameter_flags(models.tiny_hyperparameters(name))


@pytest.mark.parametrize("name", models.NAMES)
def test_end_to_end_run(name, tiny_args):
    extra = [] if models.capabilities(name).autoregressive else ["--nonautoregressive"]
    metrics = run.main(tiny_args + ["--model", name, "--train_epochs", "1"] + extra + tiny_flags(name))[0]["metrics"]
    assert metrics["n_test_windows"] == 105 and torch.isfinite(torch.tensor(metrics["mse"]))


@pytest.mark.parametrize("name", [n for n in models.NAMES if models.capabilities(n).exogenous])
def test_an_exogenous_model_forecasts_the_target_from_the_covariates_and_is_not_rolled_out(name, tiny_args):
    from utils.errors import ConfigError
    args = tiny_args + ["--model", name, "--nonautoregressive", "--covariate", "--train_epochs", "1"] + tiny_flags(name)
    metrics = run.main(args + ["--visualize"])[0]["metrics"]  # plots the target's forecast, none for covariates
    assert metrics["features"] == "MS" and torch.isfinite(torch.tensor(metrics["mse"]))
    with pytest.raises(ConfigError, match="cannot roll its forecast out to --test_pred_len 32"):
        run.main(args + ["--test_pred_len", "32"])


@pytest.mark.parametrize("name", [n for n in models.NAMES if not models.capabilities(n).covariate])
def test_covariate_mode_is_refused_by_channel_independent_models(name, tiny_args):
    from utils.errors import ConfigError
    direct = ["--nonautoregressive"] if models.capabilities(name).direct else []
    with pytest.raises(ConfigError, match="channel-independent"):
        run.main(tiny_args + ["--model", name, "--covariate"] + direct)


@pytest.mark.parametrize("name", [n for n in models.NAMES if models.capabilities(n).multi_output])
def test_every_model_trains_on_the_quantile_loss_and_is_scored_on_its_quantiles(name, tiny_args):
    """One epoch of --loss quantile (on 30% of the training windows): k outputs per point; the median is the point forecast the point metrics score,
    the quantiles give CRPS and the intervals; an autoregressive model rolls out its median."""
    caps = models.capabilities(name)
    extra = ["--test_pred_len", "40"] if caps.autoregressive else ["--nonautoregressive"]
    grid = "0.05,0.1,0.25,0.5,0.75,0.9,0.95"
    # a model that forecasts fixed quantiles (a published one's) is built with this grid as its own
    own = ["--quantile_levels", grid] if "quantile_levels" in models.hyperparameters(name) else []
    args = tiny_args + ["--model", name, "--train_epochs", "1", "--subset_rand_ratio", "0.3", "--loss", "quantile",
                        "--quantiles", grid] + extra + tiny_flags(name) + own
    metrics = run.main(args)[0]["metrics"]
    assert all(torch.isfinite(torch.tensor(metrics[m])) for m in ("mse", "mae", "crps", "width_90"))
    assert 0 < metrics["coverage_50"] <= metrics["coverage_80"] <= metrics["coverage_90"] <= 1
    assert 0 < metrics["width_50"] < metrics["width_80"] < metrics["width_90"]
    assert metrics["crps"] < metrics["mae"], "a spread of quantiles scores better than its median alone"
