"""Two-process gloo runs under a real torchrun launch, compared with single-process runs."""
import pytest

import run
from tests.conftest import torchrun

METRICS = ("mse", "mae", "rmse", "mape", "mspe")


def test_every_rank_sees_the_same_validation_loss_and_stops_on_the_same_epoch(tiny_args, tmp_path):
    args = tiny_args + ["--train_epochs", "8", "--patience", "1", "--lradj", "constant", "--learning_rate", "0.05"]
    proc, ranks = torchrun(args, tmp_path / "ddp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (r0,), (r1,) = ranks
    assert [h["vali_loss"] for h in r0["history"]] == [h["vali_loss"] for h in r1["history"]]
    assert [h["train_loss"] for h in r0["history"]] == [h["train_loss"] for h in r1["history"]]
    assert len(r0["history"]) == len(r1["history"]) < 8, "early stopping should have ended this run"
    assert r0["metrics"] == r1["metrics"]


def test_ddp_test_metrics_equal_single_process_metrics_of_the_same_checkpoint(tiny_args, tmp_path):
    proc, ranks = torchrun(tiny_args, tmp_path / "ddp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = ranks[0][0]["metrics"]
    assert ddp["world_size"] == 2 and ddp["n_test_windows"] % 2 == 1  # shards of unequal size
    single = run.main(tiny_args + ["--is_training", "0"])[0]["metrics"]
    assert single["world_size"] == 1
    for k in METRICS:
        assert single[k] == pytest.approx(ddp[k], rel=1e-6), k
    rows = (tmp_path / "results" / "results.csv").read_text().strip().splitlines()
    assert len(rows) == 3, "one header + one row per test: only rank 0 appends"


@pytest.mark.parametrize("model", ["dlinear", "timer_xl"])
def test_two_processes_of_batch_b_reproduce_one_process_of_batch_2b(tiny_args, tmp_path, model):
    args = tiny_args + ["--model", model, "--dropout", "0", "--lr_scale", "none", "--learning_rate", "0.003"]
    if model == "dlinear":
        args += ["--nonautoregressive"]
    proc, ranks = torchrun(args + ["--batch_size", "8"], tmp_path / "ddp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = ranks[0][0]
    single = run.main(args + ["--batch_size", "16", "--results_dir", str(tmp_path / "single")])[0]
    assert ddp["metrics"]["global_batch_size"] == single["metrics"]["global_batch_size"] == 16
    for a, b in zip(ddp["history"], single["history"]):
        for k in ("train_loss", "vali_loss", "test_loss"):
            assert a[k] == pytest.approx(b[k], rel=1e-6), (k, a["epoch"])
    for k in METRICS:
        assert ddp["metrics"][k] == pytest.approx(single["metrics"][k], rel=1e-6), k
