"""Paper reproduction tooling: the report against published numbers, plots, the drop-last emulation."""
import csv
import json
import os

import pytest

import run
from utils import report

REFERENCE_COLUMNS = ["paper", "table", "model", "dataset", "seq_len", "horizon", "mse", "mae", "source"]


def _metrics(root, name, **m):
    os.makedirs(root / name)
    (root / name / "metrics.json").write_text(json.dumps(m))


def test_shipped_reference_table_names_a_source_for_every_number():
    with open(report.DEFAULT_REFERENCE, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == REFERENCE_COLUMNS
    assert all(r["source"].startswith("https://") and float(r["mse"]) > 0 and float(r["mae"]) > 0 for r in rows)
    keys = [(r["model"], r["dataset"], r["seq_len"], r["horizon"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert ("dlinear", "ETTh1", "336", "96") in keys and ("patchtst", "ILI", "104", "24") in keys


def test_report_compares_with_the_paper_and_marks_misses(tmp_path):
    _metrics(tmp_path, "a", dataset="ETTh1", test_pred_len=96, model="dlinear", seq_len=336, mse=0.370, mae=0.395)
    _metrics(tmp_path, "b", dataset="ETTh1", test_pred_len=192, model="dlinear", seq_len=336, mse=0.420, mae=0.43)
    _metrics(tmp_path, "c", dataset="ETTh1", test_pred_len=192, model="dlinear", seq_len=336, mse=0.440, mae=0.43)
    _metrics(tmp_path, "d", dataset="mydata", test_pred_len=24, model="timer_xl", seq_len=96, mse=0.5, mae=0.5)
    report.main([str(tmp_path)])
    text = (tmp_path / "report.md").read_text()
    rows = {line.split(" | ")[1] + "/" + line.split(" | ")[2]: line for line in text.splitlines()
            if line.startswith("| ETTh1") or line.startswith("| mydata")}
    assert "0.370 | 0.375 | -1.3%" in rows["96/dlinear"]            # better than the paper: no mark
    assert "0.430 | 0.405 | **+6.2%** ✗" in rows["192/dlinear"]      # mean of two runs, 6% worse: marked
    assert rows["192/dlinear"].endswith("| 2: 0.420–0.440 |")
    assert "| — | — |" in rows["24/timer_xl"]                         # no published number: shown, not compared
    assert "3 cells; 1 worse than the paper's MSE by more than 2%" in text


def test_report_needs_some_results(tmp_path):
    with pytest.raises(SystemExit, match="no metrics.json"):
        report.main([str(tmp_path)])


def test_visualize_writes_forecast_and_loss_plots(tiny_args, tmp_path):
    run.main(tiny_args + ["--visualize", "--plot_channel", "0", "--train_epochs", "1"])
    (run_dir,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    names = sorted(os.listdir(run_dir))
    assert [n for n in names if n.startswith("forecast_")] == [f"forecast_{i}.png" for i in range(4)]
    assert "loss_curves.png" in names
    assert all((run_dir / n).read_bytes()[:4] == b"\x89PNG" for n in names if n.endswith(".png"))


def test_test_drop_last_scores_only_whole_batches(tiny_args):
    every = run.main(tiny_args + ["--train_epochs", "1"])[0]["metrics"]
    dropped = run.main(tiny_args + ["--train_epochs", "1", "--is_training", "0", "--test_drop_last"])[0]["metrics"]
    assert every["n_test_windows"] == 105 and dropped["n_test_windows"] == 96  # 6 batches of 16
    assert dropped["mse"] != every["mse"]


def test_benchmark_file_names_map_to_paper_dataset_names():
    from data_provider.factory import dataset_name
    from utils.args import parse_args
    assert dataset_name(parse_args(["--data", "custom", "--data_path", "national_illness.csv"])) == "ILI"
    assert dataset_name(parse_args(["--data", "custom", "--data_path", "x/exchange_rate.csv"])) == "Exchange"
    assert dataset_name(parse_args(["--data", "custom", "--data_path", "mine.csv"])) == "mine"
    assert dataset_name(parse_args(["--data", "ETTm2"])) == "ETTm2"
