"""Sharded model states (--fsdp) and activation checkpointing: FSDP trains like DDP, its checkpoints are those
of any other run, a sharded run resumes exactly, and recomputing activations changes no number."""
import pytest
import torch

import run
from tests.conftest import elsewhere, forked_ranks
from tests.integration.test_fsdp import METRICS, _rows
from utils import checkpoint

# Two Transformer blocks, no dropout (a rank draws its own masks), lr not scaled. Batch 16 of 2 ranks with 2
# micro-batches a step: 5 steps an epoch, the gradients of the first micro-batch kept unreduced; 105 test windows
# are 7 batches, 4 on rank 0 and 3 on rank 1 (46 validation windows: 2 and 1), so evaluations run in lockstep.
SAME_UPDATE = ["--e_layers", "2", "--dropout", "0", "--lr_scale", "none", "--learning_rate", "0.003",
               "--accum_steps", "2"]


def _last(tmp_path, setting) -> dict:
    return checkpoint.load(str(tmp_path / "ckpt" / setting / "last.pth"))


def test_fsdp_trains_like_ddp_on_half_the_state_and_checkpoints_load_both_ways(tiny_args, tmp_path):
    args = tiny_args + SAME_UPDATE
    proc, ranks = forked_ranks(args, tmp_path / "ddp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ddp_run = ranks[0][0]
    ddp = ddp_run["metrics"]
    proc, ranks = forked_ranks(args + ["--fsdp"], tmp_path / "fsdp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sharded_run,), (other_rank,) = ranks
    sharded = sharded_run["metrics"]
    assert _rows(sharded_run) == _rows(other_rank) and sharded == other_rank["metrics"]
    # a result of its own: gradients are reduce-scattered, not all-reduced, so it equals DDP up to rounding
    assert sharded["config"]["training"]["fsdp"] is True and "fsdp" not in ddp["config"]["training"]
    assert sharded["setting"] != ddp["setting"]
    for a, b in zip(_rows(sharded_run), _rows(ddp_run), strict=True):
        for k in ("train_loss", "vali_loss", "test_loss"):
            assert a[k] == pytest.approx(b[k], rel=1e-5), (k, a["epoch"])
    for k in METRICS:
        assert sharded[k] == pytest.approx(ddp[k], rel=1e-5), k
    # each rank holds half the parameters and optimizer state (every tensor cut along its first dimension)
    assert sharded["state_mb"] == pytest.approx(ddp["state_mb"] / 2, rel=0.05)
    assert "parameters + optimizer state per rank" in proc.stderr

    # one checkpoint format: the gathered state is what an unsharded run saves, numbered alike
    a, b = _last(tmp_path, sharded["setting"]), _last(tmp_path, ddp["setting"])
    assert a["model"].keys() == b["model"].keys() and a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]
    torch.testing.assert_close(a["model"], b["model"], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(a["optimizer"]["state"], b["optimizer"]["state"], rtol=1e-3, atol=1e-6)

    # the sharded run's checkpoint tested by one process, the DDP one by a sharded group: the same scores
    alone = run.main(args + ["--is_training", "0", "--test_dir", sharded["setting"]])[0]["metrics"]
    proc, ranks = forked_ranks(args + ["--fsdp", "--is_training", "0", "--test_dir", ddp["setting"]],
                               tmp_path / "fsdp_tests_ddp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for k in METRICS:
        assert alone[k] == pytest.approx(sharded[k], rel=1e-6), k
        assert ranks[0][0]["metrics"][k] == pytest.approx(ddp[k], rel=1e-6), k


def test_a_model_without_blocks_is_sharded_whole(tiny_args, tmp_path):
    """DLinear has no layer list: the root alone is one FSDP unit, and each rank still holds half its state."""
    args = tiny_args + ["--model", "dlinear", "--nonautoregressive", "--lr_scale", "none", "--learning_rate", "0.01"]
    runs = {}
    for name, extra in (("ddp", []), ("fsdp", ["--fsdp"])):
        proc, ranks = forked_ranks(args + extra, tmp_path / name)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = ranks[0][0]["metrics"]
    for k in METRICS:
        assert runs["fsdp"][k] == pytest.approx(runs["ddp"][k], rel=1e-5), k
    assert runs["fsdp"]["state_mb"] == pytest.approx(runs["ddp"]["state_mb"] / 2, rel=0.05)


def test_a_sharded_run_killed_mid_row_resumes_exactly(tiny_args, tmp_path):
    """16 steps of 2 x 16, 11 an epoch, a row every 6 and a checkpoint every 4, dropout on. The group dies at
    step 12 (epoch 2, step 1); it resumes from step 8 (2 steps into its row) with every rank's random stream,
    the optimizer state scattered back into its shards and the row's losses so far, and ends as the
    uninterrupted run."""
    args = tiny_args + ["--e_layers", "2", "--fsdp", "--train_steps", "16", "--val_every", "6", "--save_every", "4",
                        "--lradj", "warmup_cosine", "--resume", "auto"]
    proc, whole = forked_ranks(args + elsewhere(tmp_path, "whole"), tmp_path / "whole")
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc, _ = forked_ranks(args + elsewhere(tmp_path, "cut"), tmp_path / "cut", env={"STOP_AT": "2:1"})
    assert proc.returncode != 0 and "stopped at epoch 2, step 1" in proc.stderr
    proc, resumed = forked_ranks(args + elsewhere(tmp_path, "cut"), tmp_path / "resumed")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 rows and 2 micro-batches done, step 8" in proc.stderr
    assert [h["step"] for h in whole[0][0]["history"]] == [6, 12, 16]
    assert _rows(resumed[0][0]) == _rows(whole[0][0])
    for k in METRICS:
        assert resumed[0][0]["metrics"][k] == whole[0][0]["metrics"][k], k
