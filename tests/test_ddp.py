"""Two-process gloo runs under a real torchrun launch, compared with single-process runs."""
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import run
from tests.conftest import torchrun
from utils.sync_batchnorm import CrossRankBatchNorm, sync_batchnorm

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


@pytest.mark.parametrize("model", ["dlinear", "timer_xl", "patchtst"])
def test_two_processes_of_batch_b_reproduce_one_process_of_batch_2b(tiny_args, tmp_path, model):
    """Direct, autoregressive, and BatchNorm synchronised across ranks (PatchTST)."""
    args = tiny_args + ["--model", model, "--dropout", "0", "--lr_scale", "none", "--learning_rate", "0.003"]
    if model != "timer_xl":
        args += ["--nonautoregressive"]
    proc, ranks = torchrun(args + ["--batch_size", "8"], tmp_path / "ddp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = ranks[0][0]
    single = run.main(args + ["--batch_size", "16", "--results_dir", str(tmp_path / "single")])[0]
    assert ddp["metrics"]["global_batch_size"] == single["metrics"]["global_batch_size"] == 16
    # Training losses agree to float rounding. With BatchNorm, biases right before a norm get zero
    # gradient in exact arithmetic; Adam turns their rounding noise into +-lr steps that the norm
    # cancels in training but that shift the running mean used in evaluation: looser there.
    eval_rel = 1e-3 if model == "patchtst" else 1e-6
    for a, b in zip(ddp["history"], single["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6), a["epoch"]
        for k in ("vali_loss", "test_loss"):
            assert a[k] == pytest.approx(b[k], rel=eval_rel), (k, a["epoch"])
    for k in METRICS:
        assert ddp["metrics"][k] == pytest.approx(single["metrics"][k], rel=eval_rel), k


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batchnorm_rank(rank, port, x, target, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    bn = sync_batchnorm(nn.Sequential(nn.BatchNorm1d(4)), torch.device("cpu"))
    assert isinstance(bn[0], CrossRankBatchNorm)
    local = x.chunk(2)[rank].clone().requires_grad_(True)
    ((bn(local) - target.chunk(2)[rank]) ** 2).mean().backward()
    out[rank] = (bn[0].running_mean, bn[0].running_var, local.grad, bn[0].weight.grad)
    dist.destroy_process_group()


def test_batchnorm_synchronised_over_two_ranks_equals_one_batch_of_both():
    """Statistics, running buffers and gradients of a 2-rank CrossRankBatchNorm = BatchNorm on the union."""
    x, target = torch.randn(8, 4, 5) * 3 + 1, torch.randn(8, 4, 5)
    out = mp.Manager().dict()
    mp.spawn(_batchnorm_rank, args=(_free_port(), x, target, out), nprocs=2)
    bn = nn.BatchNorm1d(4)
    whole = x.clone().requires_grad_(True)
    ((bn(whole) - target) ** 2).mean().backward()
    assert torch.allclose(out[0][0], bn.running_mean, atol=1e-6)
    assert torch.allclose(out[0][1], bn.running_var, atol=1e-6)
    # each rank's loss is its half's mean and DDP averages gradients: half the sum is the whole's gradient
    assert torch.allclose(torch.cat([out[0][2], out[1][2]]) / 2, whole.grad, atol=1e-7)
    assert torch.allclose((out[0][3] + out[1][3]) / 2, bn.weight.grad, atol=1e-6)


# ---- gradient accumulation, ZeRO, stragglers ------------------------------------------------------
SAME_UPDATE = ["--dropout", "0", "--lr_scale", "none", "--learning_rate", "0.003"]


def _assert_same_training(a, b, rel=1e-6):
    for x, y in zip(a["history"], b["history"], strict=True):
        for k in ("train_loss", "vali_loss", "test_loss"):
            assert x[k] == pytest.approx(y[k], rel=rel), (k, x["epoch"])
    for k in METRICS:
        assert a["metrics"][k] == pytest.approx(b["metrics"][k], rel=rel), k


def test_accumulating_three_batches_equals_one_three_times_larger_batch(tiny_args, tmp_path):
    accumulated = run.main(tiny_args + SAME_UPDATE + ["--batch_size", "8", "--accum_steps", "3"])[0]
    large = run.main(tiny_args + SAME_UPDATE + ["--batch_size", "24"])[0]
    assert accumulated["metrics"]["global_batch_size"] == large["metrics"]["global_batch_size"] == 24
    _assert_same_training(accumulated, large)


def test_ddp_accumulation_all_reduces_once_per_step_and_equals_the_large_batch(tiny_args, tmp_path):
    env = {"COUNT_ALLREDUCE": "1"}
    proc, ranks = torchrun(tiny_args + SAME_UPDATE + ["--batch_size", "4", "--accum_steps", "2"],
                           tmp_path / "accum", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    accumulated = ranks[0][0]
    proc, ranks = torchrun(tiny_args + SAME_UPDATE + ["--batch_size", "8"], tmp_path / "plain", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plain = ranks[0][0]
    # 179 windows per rank, 176 of them in whole steps: 44 micro-batches of 4 make 22 steps, like 22 batches of 8
    assert accumulated["allreduces"] == plain["allreduces"] == 2 * 22
    single = run.main(tiny_args + SAME_UPDATE + ["--batch_size", "16", "--results_dir", str(tmp_path / "one")])[0]
    _assert_same_training(accumulated, single)


def test_zero_sharded_optimizer_trains_like_the_replicated_one(tiny_args, tmp_path):
    proc, ranks = torchrun(tiny_args + SAME_UPDATE + ["--zero"], tmp_path / "zero")
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc, plain = torchrun(tiny_args + SAME_UPDATE, tmp_path / "plain")
    assert proc.returncode == 0, proc.stderr[-3000:]
    _assert_same_training(ranks[0][0], plain[0][0])
    # --zero is accepted in one process too (nothing to shard): one process of 2 x 16 trains the same
    again = run.main(tiny_args + SAME_UPDATE + ["--zero", "--batch_size", "32", "--results_dir", str(tmp_path / "one")])
    _assert_same_training(again[0], plain[0][0])


def test_a_straggling_rank_is_named_each_epoch(tiny_args, tmp_path):
    proc, ranks = torchrun(tiny_args + ["--model", "dlinear", "--nonautoregressive"], tmp_path / "slow",
                           env={"SLOW_RANK": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [line for line in proc.stderr.splitlines() if "per forward" in line and "the group waits" in line]
    assert len(warnings) == 2 and all("epoch" in w and "rank 1 takes" in w for w in warnings)


def test_slow_ranks_are_those_beyond_one_and_a_half_medians():
    from utils.dist import slow_ranks
    assert slow_ranks([1.0, 1.1, 0.9, 2.0]) == [3]
    assert slow_ranks([1.0, 1.4]) == [] and slow_ranks([1.0]) == []


# ---- mixed precision and torch.compile ------------------------------------------------------------
DLINEAR = ["--model", "dlinear", "--nonautoregressive"]


def test_compiled_model_trains_like_the_eager_one(tiny_args, tmp_path):
    eager = run.main(tiny_args + DLINEAR)[0]
    compiled = run.main(tiny_args + DLINEAR + ["--compile", "--results_dir", str(tmp_path / "compiled")])[0]
    _assert_same_training(compiled, eager, rel=1e-4)  # inductor may fuse and reorder float operations


def test_bf16_autocast_trains_close_to_fp32(tiny_args, tmp_path):
    fp32 = run.main(tiny_args + DLINEAR + ["--learning_rate", "0.01"])[0]
    amp = run.main(tiny_args + DLINEAR + ["--learning_rate", "0.01", "--use_amp",
                                          "--results_dir", str(tmp_path / "amp")])[0]
    assert amp["metrics"]["mse"] == pytest.approx(fp32["metrics"]["mse"], rel=0.05)
    assert amp["metrics"]["mse"] != fp32["metrics"]["mse"], "autocast should have run in bf16"


def test_compile_and_amp_under_ddp(tiny_args, tmp_path):
    proc, ranks = torchrun(tiny_args + DLINEAR + ["--compile", "--use_amp"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ranks[0][0]["metrics"] == ranks[1][0]["metrics"]
    assert ranks[0][0]["metrics"]["mse"] < 2
