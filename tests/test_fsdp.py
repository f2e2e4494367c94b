"""Sharded model states (--fsdp) and activation checkpointing: FSDP trains like DDP, its checkpoints are those
of any other run, a sharded run resumes exactly, and recomputing activations changes no number."""
import pytest
import torch
from torch import nn

import models
import run
from exp.config import parse_args, resolve
from exp.flags import model_hparams
from exp.parallel import model_blocks
from tests.conftest import elsewhere, forked_ranks
from utils import checkpoint, fsdp

METRICS = ("mse", "mae", "rmse", "mape", "mspe")
# Two Transformer blocks, no dropout (a rank draws its own masks), lr not scaled. Batch 16 of 2 ranks with 2
# micro-batches a step: 5 steps an epoch, the gradients of the first micro-batch kept unreduced; 105 test windows
# are 7 batches, 4 on rank 0 and 3 on rank 1 (46 validation windows: 2 and 1), so evaluations run in lockstep.
SAME_UPDATE = ["--e_layers", "2", "--dropout", "0", "--lr_scale", "none", "--learning_rate", "0.003",
               "--accum_steps", "2"]
NO_TIMES = ("train_seconds", "eval_seconds")


def _rows(result) -> list:
    return [{k: v for k, v in row.items() if k not in NO_TIMES} for row in result["history"]]


def _last(tmp_path, setting) -> dict:
    return checkpoint.load(str(tmp_path / "ckpt" / setting / "last.pth"))


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


def test_activation_checkpointing_changes_no_number(tiny_args, tmp_path):
    """Dropout on: the recomputation draws the masks of the forward again."""
    args = tiny_args + ["--e_layers", "2", "--dropout", "0.1"]
    plain = run.main(args)[0]
    recomputed = run.main(args + ["--activation_checkpointing"] + elsewhere(tmp_path, "ac"))[0]
    assert _rows(recomputed) == _rows(plain)
    assert recomputed["metrics"]["setting"] == plain["metrics"]["setting"]  # not part of what a run is
    for k in METRICS:
        assert recomputed["metrics"][k] == plain["metrics"][k], k


class _Heads(nn.Module):
    """A block list the model calls (layers, with a list inside each) and one whose weights it reads directly."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.ModuleList([nn.Linear(4, 4)])[0])
                                    for _ in range(2))
        self.heads = nn.ModuleList(nn.Linear(4, 1) for _ in range(3))
        self.unused = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        self.no_parameters = nn.ModuleList([nn.ReLU()])

    def forward(self, x):
        for layer in self.layers:
            x = self.no_parameters[0](layer(x))
        return x @ torch.cat([h.weight for h in self.heads]).T


def test_blocks_are_the_called_layers_of_the_outermost_module_lists(tiny_csv, tiny_args):
    toy = _Heads()
    assert fsdp.blocks(toy, lambda: toy(torch.zeros(1, 4))) == list(toy.layers)
    args = resolve(parse_args(tiny_args + ["--e_layers", "3"]))
    data = run.build_data(args, torch.device("cpu"), True, False)
    model = models.build(args.model, {**args.as_dict(), "enc_in": data.n_channels, "n_marks": data.n_marks},
                         model_hparams(args))
    blocks = model_blocks(model, args, data.first_window())
    assert len(blocks) == 3 and all(any(b is m for m in model.modules()) for b in blocks)


@pytest.fixture
def one_rank_group(tmp_path):
    """A process group of this process alone (fully_shard needs one)."""
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_shard_puts_each_block_and_the_root_under_fsdp_gathering_in_bf16(one_rank_group):
    from torch.distributed.fsdp import FSDPModule
    toy = _Heads()
    blocks = fsdp.blocks(toy, lambda: toy(torch.zeros(1, 4)))
    fsdp.shard(toy, blocks, torch.bfloat16, cpu_offload=False)
    assert all(isinstance(m, FSDPModule) for m in [toy, *blocks])
    assert not any(isinstance(m, FSDPModule) for m in toy.heads)  # read as tensors: the root's
    seen = []
    # inside a block's forward: its parameters gathered in bf16, its input cast to bf16
    blocks[0][0].register_forward_pre_hook(lambda linear, inputs: seen.append((linear.weight.dtype, inputs[0].dtype)))
    out = toy(torch.zeros(2, 4))
    assert seen == [(torch.bfloat16, torch.bfloat16)] and out.dtype == torch.bfloat16
    toy.reshard()  # the root keeps its parameters gathered after forward, for the backward that usually follows
    assert all(p.dtype == torch.float32 for p in toy.parameters())  # the shards the optimizer updates
