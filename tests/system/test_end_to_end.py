"""run.py end to end on generated data: autoregressive, direct, covariate and univariate modes, outputs, bad input."""
import csv
import json
import os
import platform

import numpy as np
import pandas as pd
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import run_cli, run_dirs


def _only_run_dir(results_dir):
    (path,) = run_dirs(results_dir)
    return str(path)


def test_autoregressive_timer_xl_cli_writes_every_output(tiny_args, tmp_path):
    proc = run_cli(tiny_args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = _only_run_dir(tmp_path / "results")
    metrics = json.load(open(os.path.join(run_dir, "tp16", "metrics.json")))
    for key in ("mse", "mae", "rmse", "mape", "mspe", "world_size", "global_batch_size", "learning_rate",
                "effective_lr", "best_epoch", "epochs_run", "test_pred_len", "n_test_windows", "setting", "test",
                "config_id", "seed", "config", "provenance"):
        assert key in metrics, key
    assert metrics["n_test_windows"] == 105 and metrics["epochs_run"] == 2 and np.isfinite(metrics["mse"])
    assert metrics["provenance"]["git_commit"] and metrics["provenance"]["command"].endswith(" ".join(tiny_args))
    assert metrics["provenance"]["denormals_flushed"] or platform.machine() not in ("x86_64", "AMD64")  # run.main's
    windows = np.load(os.path.join(run_dir, "tp16", "window_errors.npz"))  # one float32 per window and metric
    assert set(windows) == {*(f"{m}{scale}" for m in ("mse", "mae", "rmse", "mape", "mspe", "smape", "crps",
                                                       "crps_sample", "mase", "msis", "nmae", "ncrps",
                                                       *(f"{m}_{p}" for m in ("coverage", "width") for p in (50, 80, 90)))
                             for scale in ("", "_original"))}
    assert windows["mse"].shape == (105,) and np.allclose(windows["crps"], windows["mae"], rtol=1e-6, atol=0)
    assert windows["mse"].dtype == np.float32 and windows["mse"].mean() == pytest.approx(metrics["mse"], rel=1e-6)
    assert np.sqrt(windows["rmse"].mean()) == pytest.approx(metrics["rmse"], rel=1e-6)
    history = list(csv.DictReader(open(os.path.join(run_dir, "history.csv"))))
    assert [int(h["epoch"]) for h in history] == [1, 2]
    assert set(history[0]) >= {"train_loss", "vali_loss", "test_loss", "lr", "train_seconds", "eval_seconds"}
    # run.py leaves through os._exit: everything must have been flushed and closed before
    events = EventAccumulator(os.path.join(run_dir, "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("vali_loss")] == [1, 2]
    rows = list(csv.DictReader(open(tmp_path / "results" / "results.csv")))
    assert len(rows) == 1 and float(rows[0]["mse"]) == pytest.approx(metrics["mse"])
    assert "test (105 windows, horizon 16)" in proc.stderr
    # the main rank says where the run's outputs are
    assert f"results {run_dir}/tp16 | checkpoint {tmp_path}/ckpt/{os.path.basename(run_dir)}/checkpoint.pth" \
        in proc.stderr.strip().splitlines()[-1]


def test_default_run_generates_synthetic_data(tmp_path):
    proc = run_cli(["--train_epochs", "1", "--d_model", "16", "--d_ff", "16", "--n_heads", "2",
                    "--seq_len", "192", "--input_token_len", "48", "--output_token_len", "48"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(tmp_path / "dataset" / "synthetic" / "synthetic.csv")
    assert list(frame.columns) == ["date", "cov0", "cov1", "cov2", "OT"] and len(frame) == 8000
    assert (tmp_path / "results" / "results.csv").is_file()
