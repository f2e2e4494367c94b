"""run.py end to end on generated data: autoregressive, direct, covariate and univariate modes, outputs, bad input."""
import numpy as np
import pandas as pd
import pytest

import run
from utils.errors import ConfigError

DLINEAR = ["--model", "dlinear", "--nonautoregressive"]


def test_test_only_rolls_the_saved_model_to_any_horizon(tiny_args):
    trained, again = run.main(tiny_args)[0], run.main(tiny_args + ["--is_training", "0"])[0]
    assert trained["epoch_seconds"] > 0 and again["epoch_seconds"] == 0  # a test trains nothing
    trained, again = trained["metrics"], again["metrics"]
    assert again["mse"] == pytest.approx(trained["mse"], rel=1e-9)
    rolled = run.main(tiny_args + ["--is_training", "0", "--test_pred_len", "40"])[0]["metrics"]
    assert rolled["test_pred_len"] == 40 and rolled["n_test_windows"] == 105 - 24
    assert rolled["mse"] != trained["mse"]


def test_direct_dlinear_learns_better_than_the_first_epoch(tiny_args):
    result = run.main(tiny_args + DLINEAR + ["--train_epochs", "4", "--learning_rate", "0.01"])[0]
    losses = [h["vali_loss"] for h in result["history"]]
    assert min(losses[1:]) < losses[0]
    assert result["metrics"]["mse"] < 1.0  # the scaled series has unit variance: beating 1 means it learned


@pytest.mark.parametrize("extra", [["--covariate"], ["--covariate", "--last_token"],
                                   ["--model", "itransformer", "--nonautoregressive", "--covariate"],
                                   ["--valid_last"]])
def test_covariate_and_valid_last_modes(tiny_args, extra):
    metrics = run.main(tiny_args + extra)[0]["metrics"]
    assert np.isfinite(metrics["mse"]) and metrics["n_test_windows"] == 105
    assert metrics["features"] == ("MS" if "--covariate" in extra else "M")


def test_covariate_metrics_score_only_the_target_channel(tiny_args, monkeypatch):
    """Same checkpoint, two ways of scoring: covariate mode must equal the last channel of the full forecast."""
    from exp import evaluator
    seen = []
    original = evaluator.window_errors
    monkeypatch.setattr(evaluator, "window_errors",
                        lambda f, t, *scale: seen.append(f.point.shape[-1]) or original(f, t, *scale))
    run.main(tiny_args + ["--covariate"])
    assert set(seen) == {1}


def test_univariate_windows_every_channel_separately(tiny_args):
    metrics = run.main(tiny_args + ["--univariate"])[0]["metrics"]
    assert metrics["n_test_windows"] == 3 * 105 and metrics["features"] == "U"


def test_random_subset_of_training_windows_is_seeded(tiny_args, capsys):
    import torch

    from data_provider.factory import random_subset
    from data_provider.windows import WindowDataset, direct_offsets
    ds = lambda: WindowDataset(torch.randn(100, 2), None, 0, 100, 10, direct_offsets(10, 5))
    a, b = random_subset(ds(), 0.25, seed=3), random_subset(ds(), 0.25, seed=3)
    assert len(a) == 21 and torch.equal(a.subset, b.subset)
    assert not torch.equal(a.subset, torch.arange(21)), "a random subset, not the first windows"
    run.main(tiny_args + ["--subset_rand_ratio", "0.5", "--train_epochs", "1"])
    assert "179 train windows" in capsys.readouterr().err


def test_each_repetition_trains_like_a_run_with_its_own_seed(tiny_args, tmp_path):
    """--itr 2: repetition 1 initialises and shuffles with seed + 1, exactly as a fresh run with that seed: it is
    that run (the same identity), so training it again is refused."""
    flags = tiny_args + DLINEAR + ["--train_epochs", "1", "--batch_size", "64"]
    first, second = run.main(flags + ["--itr", "2"])
    assert first["metrics"]["config_id"] == second["metrics"]["config_id"]
    assert (first["metrics"]["seed"], second["metrics"]["seed"]) == (2021, 2022)
    with pytest.raises(ConfigError, match="already finished"):
        run.main(flags + ["--seed", "2022"])
    alone = run.main(flags + ["--seed", "2022", "--checkpoints", str(tmp_path / "c2"), "--results_dir",
                              str(tmp_path / "r2")])[0]["metrics"]
    assert alone["setting"] == second["metrics"]["setting"]
    assert second["metrics"]["mse"] == pytest.approx(alone["mse"], rel=1e-9)
    assert first["metrics"]["mse"] != pytest.approx(second["metrics"]["mse"], rel=1e-6)


def test_the_early_stopping_line_appears_only_when_training_stopped_early(tiny_args, capsys):
    """A constant lr makes the run of E epochs the first E epochs of the longer one; there, the stop at the
    last epoch is no early stop."""
    flags = tiny_args + DLINEAR + ["--patience", "1", "--lradj", "constant", "--learning_rate", "0.05"]
    stopped = run.main(flags + ["--train_epochs", "12"])[0]["history"]
    assert len(stopped) < 12 and "early stopping: no improvement for 1 epochs" in capsys.readouterr().err
    full = run.main(flags + ["--train_epochs", str(len(stopped))])[0]["history"]
    assert [h["vali_loss"] for h in full] == [h["vali_loss"] for h in stopped]
    assert "early stopping" not in capsys.readouterr().err


def test_irregular_timestamps_train_with_a_warning_that_counts_them(tiny_args, tmp_path, capsys):
    frame = pd.read_csv(tiny_args[tiny_args.index("--root_path") + 1] + "/tiny.csv")
    dates = pd.to_datetime(frame["date"])
    dates[300:] += pd.Timedelta(hours=5)     # one gap of 6 hours
    dates[100] += pd.Timedelta(minutes=30)   # two gaps of 30 minutes
    frame["date"] = dates
    frame.to_csv(tmp_path / "gaps.csv", index=False)
    run.main(tiny_args + DLINEAR + ["--train_epochs", "1", "--root_path", str(tmp_path), "--data_path", "gaps.csv"])
    assert "3 irregular gaps between rows (the usual step is 0 days 01:00:00), the first after row 99" \
        in capsys.readouterr().err


def test_a_run_without_a_terminal_logs_its_progress_and_the_epoch_test_can_be_skipped(tiny_args, capsys,
                                                                                        monkeypatch):
    """stderr is no terminal here (a job's log): a line every PROGRESS_SECONDS (0: every batch but the last).
    --no_epoch_test leaves history's test_loss empty, and the validation, the best epoch and the test as they were.
    The per-step schedule's lr is recorded at each row's first and last step."""
    from utils import log
    monkeypatch.setattr(log, "PROGRESS_SECONDS", 0.0)
    flags = tiny_args + DLINEAR + ["--lradj", "TST"]
    scored = run.main(flags)[0]
    err = capsys.readouterr().err
    assert "epoch 1: 1/22 batches (5%)" in err and "epoch 2: 21/22 batches (95%)" in err
    assert "batches/s, about 00:00:" in err and "epoch 1: 22/22" not in err
    skipped = run.main(flags + ["--no_epoch_test", "--des", "skip"])[0]
    assert all(np.isnan(h["test_loss"]) for h in skipped["history"])
    assert [h["vali_loss"] for h in skipped["history"]] == [h["vali_loss"] for h in scored["history"]]
    assert skipped["metrics"]["mse"] == scored["metrics"]["mse"] and "| test " not in capsys.readouterr().err
    first, second = scored["history"]
    assert first["lr"] < first["lr_last"] and second["lr"] > second["lr_last"], "OneCycle: up, then down"


@pytest.mark.parametrize("loss", ["mse", "mae"])
def test_the_chosen_loss_is_what_training_minimises_and_the_rows_report(tiny_args, loss):
    """A row's test loss, on the test windows, is the loss the test's metrics name; other losses train otherwise."""
    result = run.main(tiny_args + DLINEAR + ["--train_epochs", "1", "--loss", loss])[0]
    (row,), metrics = result["history"], result["metrics"]
    assert row["test_loss"] == pytest.approx(metrics[loss], rel=1e-6)
    other = {"mse": "mae", "mae": "mse"}[loss]
    assert row["test_loss"] != pytest.approx(metrics[other], rel=1e-3)


def test_a_probabilistic_forecast_is_plotted_with_its_intervals_and_a_point_one_without(tiny_args, monkeypatch):
    from utils import visualize
    seen = []
    original = visualize.plot_forecast
    monkeypatch.setattr(visualize, "plot_forecast", lambda *a: seen.append(a[-1]) or original(*a))
    flags = tiny_args + DLINEAR + ["--train_epochs", "1", "--visualize"]
    run.main(flags + ["--loss", "quantile", "--quantiles", "0.05,0.1,0.25,0.5,0.75,0.9,0.95"])
    assert len(seen) == 4 and all(sorted(bands) == [50, 80, 90] for bands in seen)
    for bands in seen:
        assert (bands[90][0] <= bands[50][0]).all() and (bands[50][0] <= bands[50][1]).all()
        assert (bands[50][1] <= bands[90][1]).all()
    seen.clear()
    run.main(flags + ["--loss", "quantile", "--des", "grid"])  # 0.1..0.9: no 0.05 and 0.95 for the 90% band
    assert all(sorted(bands) == [50, 80] for bands in seen)
    seen.clear()
    run.main(flags)
    assert seen == [{}] * 4


def test_a_univariate_test_of_a_subset_of_windows_maps_each_back_with_its_own_channels_scale(tiny_args, tmp_path):
    """--test_windows scores a seeded subset: each window's original-scale error is its error times the std of the
    channel it comes from (its position in the subset, not in the whole split)."""
    import os

    import torch

    from data_provider.factory import build_data
    from data_provider.windows import seeded_subset
    from exp.config import parse_args, resolve
    args = [*tiny_args, "--model", "dlinear", "--nonautoregressive", "--univariate", "--test_windows", "40",
            "--train_epochs", "1"]
    metrics = run.main(args)[0]["metrics"]
    errors = np.load(os.path.join(tmp_path, "results", metrics["setting"], metrics["test"], "window_errors.npz"))
    data = build_data(resolve(parse_args(args)), torch.device("cpu"), True, False)
    test = data.datasets["test"]
    channel = (seeded_subset(test.n_windows, 40, metrics["seed"]) // test.n_starts).numpy()
    assert len(set(channel)) > 1
    np.testing.assert_allclose(errors["mae_original"], errors["mae"] * data.scaler.std[channel], rtol=1e-4)
