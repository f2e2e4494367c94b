"""Two-process gloo runs (ranks forked from the test process; a real torchrun launch where the launch matters),
compared with single-process runs."""
import json
import os
import socket

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import models
import run
from models.layers.batch_stats import BatchMean
from tests.conftest import elsewhere, forked_ranks, torchrun
from utils.metrics import reported_names
from utils.sync_batchnorm import CrossRankBatchMean, CrossRankBatchNorm, sync_batchnorm

METRICS = ("mse", "mae", "rmse", "mape", "mspe")


def _scores_like_one_process(args, ddp, tmp_path, names=METRICS):
    """The checkpoint a 2-process run trained, tested by one process: the same metrics and the same errors of
    every window, in the same place."""
    windows = os.path.join(tmp_path, "results", ddp["setting"], ddp["test"], "window_errors.npz")
    ddp_windows = dict(np.load(windows))
    single = run.main(args + ["--is_training", "0"])[0]["metrics"]  # finds the run trained on 2 processes
    single_windows = dict(np.load(windows))
    assert set(ddp_windows) == set(reported_names()) and len(ddp_windows["mse"]) == ddp["n_test_windows"]
    for k in names:  # NaN where a metric is not defined (msis off the quantile grid): alike in both
        assert single_windows[k] == pytest.approx(ddp_windows[k], rel=1e-5, nan_ok=True), k
    assert single["setting"] == ddp["setting"] and single["test_world_size"] == 1 and single["world_size"] == 2
    assert ddp["test_world_size"] == 2 and ddp["n_test_windows"] % 32 != 0  # a last batch of its own size
    for k in names:
        assert single[k] == pytest.approx(ddp[k], rel=1e-6, nan_ok=True), k
    assert single["calibration"] == pytest.approx(ddp["calibration"], rel=1e-9)  # shares of whole windows
    rows = (tmp_path / "results" / "results.csv").read_text().strip().splitlines()
    assert len(rows) == 2, "one header + one row per run and test: only rank 0 writes, testing again replaces it"


def test_every_rank_stops_on_the_same_epoch_and_the_test_scores_like_one_process(tiny_args, tmp_path):
    args = tiny_args + ["--train_epochs", "8", "--patience", "1", "--lradj", "constant", "--learning_rate", "0.05"]
    proc, ranks = forked_ranks(args, tmp_path / "ddp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (r0,), (r1,) = ranks
    assert [h["vali_loss"] for h in r0["history"]] == [h["vali_loss"] for h in r1["history"]]
    assert [h["train_loss"] for h in r0["history"]] == [h["train_loss"] for h in r1["history"]]
    assert len(r0["history"]) == len(r1["history"]) < 8, "early stopping should have ended this run"
    assert r0["metrics"] == r1["metrics"]
    _scores_like_one_process(args, r0["metrics"], tmp_path)


SAMPLED = ["--num_samples", "16", "--test_pred_len", "32", "--univariate"]  # a window: its channel's scale


@pytest.mark.parametrize("loss, sampling", [("quantile", []), ("student_t", []), ("mixture", SAMPLED)])
def test_probabilistic_metrics_of_two_ranks_equal_one_process(tiny_args, tmp_path, loss, sampling):
    """CRPS, coverage and widths are sums over windows too: two ranks score what one process scores. Sample paths
    (rolled out over two forecasts) are drawn from each window's own stream: the same samples on any rank."""
    args = tiny_args + ["--model", "dlinear", "--nonautoregressive", "--train_epochs", "1", "--loss", loss,
                        "--quantiles", "0.05,0.1,0.25,0.5,0.75,0.9,0.95", *sampling]
    proc, ranks = forked_ranks(args, tmp_path / "ddp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (r0,), (r1,) = ranks
    assert 0 < r0["metrics"]["coverage_90"] < 1 and 0 < r0["metrics"]["mase"]
    assert np.isnan(r0["metrics"]["crps_sample"]) != bool(sampling)
    assert json.dumps(r0["metrics"]) == json.dumps(r1["metrics"]), "the ranks agree (NaN included)"
    _scores_like_one_process(args, r0["metrics"], tmp_path, reported_names())


def test_timesnet_scored_by_two_ranks_equals_one_process(tiny_args, tmp_path):
    """TimesNet picks its periods from the whole batch: the ranks score one process's batches, not shards."""
    args = tiny_args + ["--model", "timesnet", "--nonautoregressive", "--train_epochs", "1", "--top_k", "2",
                        "--num_kernels", "2"]
    proc, ranks = forked_ranks(args, tmp_path / "ddp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    _scores_like_one_process(args, ranks[0][0]["metrics"], tmp_path)
# the models' own flags of the DDP equivalence runs (full attention: ProbSparse draws keys per rank)
DDP_MODEL_FLAGS = {"informer": ["--attn", "full", "--e_layers", "2", "--label_len", "8"],
                   "time_moe": ["--horizons", "1,4", "--num_experts", "4"], "cyclenet": ["--cycle", "24"]}


@pytest.mark.parametrize("model", ["dlinear", "timer_xl", "patchtst", "tsmixer", "informer", "time_moe", "cyclenet",
                                   "xpatch", "pdf", "moderntcn"])
def test_two_processes_of_batch_b_reproduce_one_process_of_batch_2b(tiny_args, tmp_path, model):
    """Direct, autoregressive, BatchNorm synchronised across ranks (PatchTST over patches, TSMixer over whole
    windows with covariates mixed, Informer's distilling between encoder layers), a loss term built from a
    statistic of the global batch (Time-MoE's expert load) and the windows' positions (CycleNet's cycle); the BatchNorm
    of issue 48's models (xPatch's patches, PDF's convolutions, ModernTCN's blocks).
    351 training windows: one process at batch 16 takes 21 steps and drops 15 windows; two ranks take the
    same 21 steps of 2 x 8."""
    args = tiny_args + ["--model", model, "--dropout", "0", "--lr_scale", "none", "--learning_rate", "0.003",
                        "--subset_rand_ratio", "0.9805"] + DDP_MODEL_FLAGS.get(model, [])
    if models.capabilities(model).direct:
        args += ["--nonautoregressive"]
    # DLinear's launch also has rank 1 straggle (20 ms per step, numerics untouched): it must be named each epoch
    slow = {"SLOW_RANK": "1"} if model == "dlinear" else {}
    proc, ranks = forked_ranks(args + ["--batch_size", "8"], tmp_path / "ddp", env={"COUNT_ALLREDUCE": "1", **slow})
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp = ranks[0][0]
    assert "351 train windows, 21 steps/epoch" in proc.stderr and ddp["allreduces"] == 2 * 21
    stragglers = [line for line in proc.stderr.splitlines() if "per forward" in line and "the group waits" in line]
    assert len(stragglers) == (2 if slow else 0) and all("rank 1 takes" in w for w in stragglers)
    single = run.main(args + ["--batch_size", "16"])[0]
    assert ddp["metrics"]["global_batch_size"] == single["metrics"]["global_batch_size"] == 16
    # Training losses agree to float rounding. With BatchNorm, biases right before a norm get zero
    # gradient in exact arithmetic; Adam turns their rounding noise into +-lr steps that the norm
    # cancels in training but that shift the running mean used in evaluation: looser there.
    # The percentage errors divide by targets near zero, which magnifies that shift: looser still.
    # Time-MoE: the expert load is averaged in float64 across ranks, in float32 by one process; the weights
    # then differ by rounding (the second epoch's training loss by 3.2e-6 on an Intel Xeon, under 1e-6 on an AMD
    # EPYC), and its top-k routing is discontinuous: a window whose experts' gate scores are that close to a tie
    # can go to another expert. The validation loss moved by 1.5e-4 on the Xeon (3e-6 on the EPYC).
    # How far the BatchNorm running statistics drift depends on the processor's rounding: PatchTST's first-epoch
    # test loss moved by 1.4e-3 on an AMD EPYC while its training losses agreed to 1e-6.
    eval_rel = {"patchtst": 3e-3, "tsmixer": 1e-3, "informer": 3e-3, "time_moe": 1e-3, "xpatch": 3e-3, "pdf": 3e-3,
                "moderntcn": 3e-3}.get(model, 1e-6)
    train_rel = 1e-5 if model == "time_moe" else 1e-6
    for a, b in zip(ddp["history"], single["history"], strict=True):
        assert a.keys() == b.keys()
        for k in (k for k in a if k == "train_loss" or k.startswith("aux_")):  # a model's own terms alike
            assert a[k] == pytest.approx(b[k], rel=train_rel), (k, a["epoch"])
        for k in ("vali_loss", "test_loss"):
            assert a[k] == pytest.approx(b[k], rel=eval_rel), (k, a["epoch"])
    for k in METRICS:
        rel = eval_rel * (10 if k in ("mape", "mspe") else 1)
        assert ddp["metrics"][k] == pytest.approx(single["metrics"][k], rel=rel), k


def test_ranks_draw_their_own_dropout_masks_and_match_one_process_in_distribution(tiny_args, tmp_path):
    """A single process gives every row of its batch its own mask; so must the ranks of a group. Criterion for
    "equal in distribution": over 4 seeds (each seed: the same initial weights and window order in both runs),
    the mean paired difference of test MSE between 2 x 8 and 1 x 16 lies within 4 standard errors of zero."""
    args = tiny_args + ["--dropout", "0.5", "--itr", "4", "--lr_scale", "none", "--learning_rate", "0.003",
                        "--train_epochs", "1"]
    masks = tmp_path / "mask"
    proc, ranks = forked_ranks(args + ["--batch_size", "8"], tmp_path / "ddp", env={"MASKS_TO": str(masks)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    m0, m1 = (torch.load(f"{masks}.{r}.pt") > 0 for r in range(2))
    n = m0.numel()
    # independent masks of keep rate 1/2 agree on half the elements; identical ones (one seed for all) on all
    assert abs(m0.float().mean().item() - 0.5) < 5 * 0.5 / n ** 0.5
    assert abs((m0 == m1).float().mean().item() - 0.5) < 5 * 0.5 / n ** 0.5, "the ranks drew the same masks"
    single = run.main(args + ["--batch_size", "16"])
    diffs = torch.tensor([d["metrics"]["mse"] - s["metrics"]["mse"] for d, s in zip(ranks[0], single, strict=True)])
    assert diffs.abs().max() > 0, "different masks must give different runs"
    assert diffs.mean().abs() < 4 * diffs.std() / len(diffs) ** 0.5, diffs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _batchnorm_rank(rank, port, x, target, out):
    torch.set_num_threads(1)  # forked: the parent's thread pool does not survive the fork
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
    mp.start_processes(_batchnorm_rank, args=(_free_port(), x, target, out), nprocs=2, start_method="fork")
    bn = nn.BatchNorm1d(4)
    whole = x.clone().requires_grad_(True)
    ((bn(whole) - target) ** 2).mean().backward()
    assert torch.allclose(out[0][0], bn.running_mean, atol=1e-6)
    assert torch.allclose(out[0][1], bn.running_var, atol=1e-6)
    # each rank's loss is its half's mean and DDP averages gradients: half the sum is the whole's gradient
    assert torch.allclose(torch.cat([out[0][2], out[1][2]]) / 2, whole.grad, atol=1e-7)
    assert torch.allclose((out[0][3] + out[1][3]) / 2, bn.weight.grad, atol=1e-6)


def _batch_mean_rank(rank, port, x, rows, out):
    torch.set_num_threads(1)  # forked: the parent's thread pool does not survive the fork
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    router = sync_batchnorm(nn.Sequential(nn.Linear(3, 4), BatchMean()), torch.device("cpu"))
    assert isinstance(router[1], CrossRankBatchMean)
    mine = x[:rows[0]] if rank == 0 else x[rows[0]:]
    probs = router[0](mine).softmax(-1)
    share = router[1](nn.functional.one_hot(probs.argmax(-1), 4).float())  # routed share: no gradient
    (4 * (share * probs.mean(0)).sum()).backward()  # a load-balancing loss
    router.eval()
    out[rank] = (share, router[1](mine.detach()), router[0].weight.grad)
    dist.destroy_process_group()


@pytest.mark.parametrize("rows", [(4, 4), (3, 5)])
def test_batch_mean_over_two_ranks_is_the_global_batch_mean_and_a_loss_built_on_it_is_exact(rows):
    """A statistic averaged by CrossRankBatchMean is the mean over both ranks' rows (weighted by their counts);
    with equal shards, DDP's gradient average of each rank's loss is the gradient of one process's loss."""
    x = torch.randn(8, 3)
    out = mp.Manager().dict()
    mp.start_processes(_batch_mean_rank, args=(_free_port(), x, rows, out), nprocs=2, start_method="fork")
    torch.manual_seed(0)
    router = nn.Sequential(nn.Linear(3, 4), BatchMean())
    probs = router[0](x).softmax(-1)
    share = router[1](nn.functional.one_hot(probs.argmax(-1), 4).float())
    (4 * (share * probs.mean(0)).sum()).backward()
    assert torch.allclose(out[0][0], share, atol=1e-7) and torch.allclose(out[1][0], share, atol=1e-7)
    assert torch.allclose(out[0][1], x[:rows[0]].mean(0)), "in evaluation each rank averages its own rows"
    if rows[0] == rows[1]:
        assert torch.allclose((out[0][2] + out[1][2]) / 2, router[0].weight.grad, atol=1e-6)
    with pytest.raises(ValueError, match="take no gradient"):
        router[1](x.requires_grad_(True))
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


def test_accumulation_with_batchnorm_is_close_to_the_large_batch_but_not_equal(tiny_args):
    """BatchNorm normalises each micro-batch by its own statistics, so PatchTST accumulating 2 x 8 computes
    something else than one batch of 16: within 5% here, far beyond float rounding (the README says so)."""
    patchtst = tiny_args + SAME_UPDATE + ["--model", "patchtst", "--nonautoregressive"]
    accumulated = run.main(patchtst + ["--batch_size", "8", "--accum_steps", "2"])[0]
    large = run.main(patchtst + ["--batch_size", "16"])[0]
    for k in ("train_loss", "vali_loss"):
        gaps = [abs(a[k] / b[k] - 1) for a, b in zip(accumulated["history"], large["history"], strict=True)]
        assert 1e-4 < max(gaps) < 0.05, (k, gaps)


def test_ddp_accumulation_all_reduces_once_per_step_and_equals_the_large_batch(tiny_args, tmp_path):
    proc, ranks = forked_ranks(tiny_args + SAME_UPDATE + ["--batch_size", "4", "--accum_steps", "2"],
                           tmp_path / "accum", env={"COUNT_ALLREDUCE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    accumulated = ranks[0][0]
    # 358 windows: 22 steps of 2 ranks x 2 micro-batches of 4; one all-reduce per step, none per micro-batch
    assert accumulated["allreduces"] == 2 * 22
    single = run.main(tiny_args + SAME_UPDATE + ["--batch_size", "16"])[0]
    _assert_same_training(accumulated, single)


def test_zero_sharded_optimizer_trains_like_the_replicated_one(tiny_args, tmp_path):
    proc, ranks = forked_ranks(tiny_args + SAME_UPDATE + ["--zero"], tmp_path / "zero")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # --zero is accepted in one process too (nothing to shard there): 2 x 16 sharded = 1 x 32
    one = run.main(tiny_args + SAME_UPDATE + ["--zero", "--batch_size", "32"])[0]
    _assert_same_training(ranks[0][0], one)
    # each rank keeps the parameters and half of Adam's two moments: 2 of the 3 parameter-sized states
    assert ranks[0][0]["metrics"]["state_mb"] == pytest.approx(one["metrics"]["state_mb"] * 2 / 3, rel=0.05)


# ---- mixed precision and torch.compile ------------------------------------------------------------
DLINEAR = ["--model", "dlinear", "--nonautoregressive"]


def test_compiled_model_trains_like_the_eager_one(tiny_args, tmp_path):
    eager = run.main(tiny_args + DLINEAR)[0]
    compiled = run.main(tiny_args + DLINEAR + ["--compile"] + elsewhere(tmp_path, "compiled"))[0]
    _assert_same_training(compiled, eager, rel=1e-4)  # inductor may fuse and reorder float operations


def test_bf16_autocast_trains_close_to_fp32(tiny_args, tmp_path):
    fp32 = run.main(tiny_args + DLINEAR + ["--learning_rate", "0.01"])[0]
    amp = run.main(tiny_args + DLINEAR + ["--learning_rate", "0.01", "--use_amp"])[0]
    assert amp["metrics"]["mse"] == pytest.approx(fp32["metrics"]["mse"], rel=0.05)
    assert amp["metrics"]["mse"] != fp32["metrics"]["mse"], "autocast should have run in bf16"


def test_compile_and_amp_under_ddp(tiny_args, tmp_path):
    proc, ranks = torchrun(tiny_args + DLINEAR + ["--compile", "--use_amp"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ranks[0][0]["metrics"] == ranks[1][0]["metrics"]
    assert ranks[0][0]["metrics"]["mse"] < 2
