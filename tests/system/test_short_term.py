"""The short-term task end to end (run.py on generated M4-shaped files): the M4 protocol's windows, its measures
against the competition's formulas, a test set read only for the final score, TSLib's command line, and two ranks
scoring like one process."""
import json
import os

import numpy as np
import pytest

import models
import run
from data_provider import m4 as m4_data
from exp.config import parse_args, resolve
from tests.conftest import forked_ranks, m4_files, m4_like
from utils import m4

HORIZON, PERIOD = 48, 24  # Hourly


@pytest.fixture
def hourly(tmp_path):
    """14 Hourly-shaped series, 120 to 400 training values: some shorter than lookback + horizon (padded), two too
    short for a training window once the validation horizon is held out."""
    train, test = m4_like(12, HORIZON, PERIOD, (150, 400))
    short, short_test = m4_like(2, HORIZON, PERIOD, (60, 90), seed=1)
    root = tmp_path / "m4"
    root.mkdir()
    m4_files(root, "Hourly", train + short, test + short_test)
    return root, train + short, np.stack(test + short_test)


def _args(root, tmp_path, *more):
    return ["--task", "short_term", "--data", "m4", "--root_path", str(root), "--seasonal_patterns", "Hourly",
            "--model", "dlinear", "--loss", "smape", "--batch_size", "4", "--train_epochs", "2",
            "--learning_rate", "0.01", "--device", "cpu", "--checkpoints", str(tmp_path / "ckpt"),
            "--results_dir", str(tmp_path / "results"), *more]


def _window_errors(tmp_path, metrics):
    return dict(np.load(os.path.join(tmp_path, "results", metrics["setting"], metrics["test"], "window_errors.npz")))


def test_m4s_measures_are_the_competitions_and_owa_is_relative_to_naive2_on_the_same_series(hourly, tmp_path):
    root, train, test = hourly
    metrics = run.main(_args(root, tmp_path))[0]["metrics"]
    assert metrics["n_test_windows"] == len(train) and metrics["test_pred_len"] == HORIZON
    assert metrics["seq_len"] == 2 * HORIZON and metrics["dataset"] == "M4-Hourly"
    by_window = _window_errors(tmp_path, metrics)
    # Naive2 with the seasonality test and MASE over each series' whole training history, as the organisers' R code
    naive2 = [m4.naive2(x, HORIZON, PERIOD) for x in train]
    assert sum(m4.is_seasonal(x, PERIOD) for x in train) >= 6, "the seasonal adjustment is exercised"
    smape2 = [m4.smape(y, f).mean() for y, f in zip(test, naive2)]
    mase2 = [m4.mase(x, y, f, PERIOD).mean() for x, y, f in zip(train, test, naive2)]
    np.testing.assert_allclose(by_window["smape_naive2"], smape2, rtol=1e-5)
    np.testing.assert_allclose(by_window["mase_naive2"], mase2, rtol=1e-5)
    assert metrics["smape_naive2"] == pytest.approx(np.mean(smape2), rel=1e-6)
    assert metrics["owa"] == pytest.approx(m4.owa(metrics["smape"], metrics["mase"], np.mean(smape2),
                                                  np.mean(mase2)), rel=1e-6)
    # the model's own sMAPE and MASE per series, from its MAE: MASE is its MAE over the series' in-sample scale
    scales = [m4.mase_scale(x, PERIOD) for x in train]
    np.testing.assert_allclose(by_window["mase"], by_window["mae"] / scales, rtol=1e-5)
    assert metrics["smape_original"] == pytest.approx(metrics["smape"])  # M4's series are scored as they are


def test_no_test_value_is_read_before_the_final_score(hourly, tmp_path):
    """A test file poisoned (values a thousand times larger) trains, validates and stops exactly like the true one:
    only the final score sees it."""
    root, train, test = hourly
    args = ["--train_epochs", "3", "--patience", "1"]
    clean = run.main(_args(root, tmp_path / "clean", *args))[0]
    m4_files(root, "Hourly", train, list(test * 1000))
    poisoned = run.main(_args(root, tmp_path / "poisoned", *args))[0]
    keys = ("train_loss", "vali_loss")
    assert [[row[k] for k in keys] for row in clean["history"]] == \
        [[row[k] for k in keys] for row in poisoned["history"]]
    assert clean["metrics"]["best_epoch"] == poisoned["metrics"]["best_epoch"]
    assert poisoned["metrics"]["smape"] > clean["metrics"]["smape"] + 50
    assert clean["metrics"]["config_id"] != poisoned["metrics"]["config_id"], "the test file is part of the data"


def test_training_windows_end_within_n_beats_history_and_never_reach_the_validation_horizon(hourly, tmp_path):
    root, train, _ = hourly
    config = resolve(parse_args(_args(root, tmp_path)))
    data = m4_data.short_term_data(config, "cpu")
    windows = data.datasets["train"]
    limit = 10 * HORIZON  # Hourly's L_H = 10
    assert windows.slots == limit and windows.epoch_windows == len(train) - 2  # the two short series sit out
    import torch
    series, origin = windows.origins(torch.arange(windows.n_windows))
    kept = [i for i, x in enumerate(train) if len(x) - HORIZON >= 2 * HORIZON + 1]
    for s, i in enumerate(kept):
        mine = origin[series == s]
        end = len(train[i]) - 2 * HORIZON  # the last origin whose target ends before the validation horizon
        assert int(mine.max()) == end and int(mine.min()) == max(1, end - limit + 1)
        assert len(mine) == limit, "every series has as many windows: series are drawn uniformly"
    batch = windows.gather(torch.arange(windows.n_windows))
    fitted = {i: train[i][:-HORIZON] for i in kept}
    for j in range(0, windows.n_windows, 997):  # a window is its series' values, zeros before the series begins
        i, o = kept[int(series[j])], int(origin[j])
        history = np.concatenate([np.zeros(2 * HORIZON), fitted[i][:o]])[-2 * HORIZON:]
        np.testing.assert_allclose(batch.x[j, :, 0].numpy(), history, rtol=1e-6)
        np.testing.assert_allclose(batch.y[j, :, 0].numpy(), fitted[i][o:o + HORIZON], rtol=1e-6)
    val, test_windows = data.datasets["val"].gather(torch.arange(len(train))), data.datasets["test"]
    np.testing.assert_allclose(val.y[0, :, 0].numpy(), train[0][-HORIZON:], rtol=1e-6)
    np.testing.assert_allclose(test_windows.gather(torch.arange(1)).x[0, :, 0].numpy(), train[0][-2 * HORIZON:],
                               rtol=1e-6)


def test_tslibs_m4_script_is_the_native_short_term_run(hourly, tmp_path):
    """TSLib's scripts/short_term_forecast/TimesNet_M4.sh flags (its model swapped for DLinear)."""
    root, _, _ = hourly
    tslib = ["--task_name", "short_term_forecast", "--is_training", "1", "--root_path", str(root),
             "--seasonal_patterns", "Hourly", "--model_id", "m4_Hourly", "--model", "DLinear", "--data", "m4",
             "--features", "M", "--e_layers", "2", "--d_layers", "1", "--factor", "3", "--enc_in", "1",
             "--dec_in", "1", "--c_out", "1", "--batch_size", "16", "--d_model", "32", "--d_ff", "32",
             "--top_k", "5", "--des", "Exp", "--itr", "1", "--learning_rate", "0.001", "--loss", "SMAPE"]
    config = resolve(parse_args(tslib))
    assert (config.task, config.seq_len, config.output_token_len, config.test_pred_len) == ("short_term", 96, 48, 48)
    assert config.univariate and config.nonautoregressive and config.no_epoch_test and config.loss == "smape"
    assert config.history_multiple == 10 and config.lookback_multiple == 2


def test_two_ranks_train_and_score_the_short_term_task_like_one_process(hourly, tmp_path):
    root, _, _ = hourly
    same = ["--loss", "mase", "--lr_scale", "none"]  # the global batch's learning rate in both
    args = _args(root, tmp_path, "--batch_size", "2", *same)
    proc, ranks = forked_ranks(args, tmp_path / "ddp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (r0,), (r1,) = ranks
    assert r0["metrics"] == r1["metrics"]
    single = run.main(_args(root, tmp_path / "single", "--batch_size", "4", *same))[0]
    for mine, theirs in zip(single["history"], r0["history"], strict=True):
        assert mine["train_loss"] == pytest.approx(theirs["train_loss"], rel=1e-5)
        assert mine["vali_loss"] == pytest.approx(theirs["vali_loss"], rel=1e-5)
    for name in ("smape", "mase", "owa", "smape_naive2", "mase_naive2", "mse"):
        assert single["metrics"][name] == pytest.approx(r0["metrics"][name], rel=1e-5), name
    assert json.dumps(r0["metrics"]["n_test_windows"]) == "14"


@pytest.mark.parametrize("name", [n for n in models.NAMES if models.capabilities(n).direct])
def test_every_model_that_forecasts_directly_trains_on_the_short_term_task(name, hourly, tmp_path):
    """The registry's direct models (the short-term task forecasts each series' horizon at once), at their tiny
    sizes: a model that reads calendar features gets zeros for M4's dateless series."""
    from tests.integration.test_models import tiny_flags
    root, _, _ = hourly
    args = _args(root, tmp_path, "--model", name, "--train_epochs", "1", "--input_token_len", "16", *tiny_flags(name))
    metrics = run.main(args)[0]["metrics"]
    assert metrics["n_test_windows"] == 14 and np.isfinite(metrics["owa"]) and np.isfinite(metrics["smape"])


def test_plots_of_m4_forecasts_are_labelled_on_their_own_scale(hourly, tmp_path, monkeypatch):
    from utils import visualize
    panels = []
    original = visualize.plot_forecast
    monkeypatch.setattr(visualize, "plot_forecast", lambda *a: panels.extend(a[4]) or original(*a))
    root, _, _ = hourly
    run.main(_args(root, tmp_path, "--train_epochs", "1", "--visualize"))
    assert len(panels) == 4 and all(not name.endswith("(scaled)") and name.startswith("M") for name, _ in panels)
