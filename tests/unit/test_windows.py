"""Windows and their order: sharding with a fake (rank, world) against one process, window indexing,
time features and split bounds."""
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DistributedSampler

from data_provider.factory import split_bounds, time_features
from data_provider.windows import (ShuffledShard, WindowDataset, autoregressive_offsets, direct_offsets, eval_loader,
                                   eval_windows, to_device, train_loader)
from models.base import Capabilities
from models.contract import model_inputs


def _windows(n):
    """A dataset of n windows whose first input value is the window's index."""
    return WindowDataset(torch.arange(n + 3, dtype=torch.float32)[:, None], None, 0, n + 3, 2, direct_offsets(2, 2))


def _ids(batch):
    return batch.x[:, 0, 0].long().tolist()


@pytest.mark.parametrize("world,batch,accum", [(2, 4, 1), (3, 2, 2), (4, 3, 1)])
def test_ddp_takes_the_steps_one_process_takes_at_the_global_batch_for_every_size(world, batch, accum):
    """Every n from one step to 80, including n mod (W*B*accum) > W*B*accum - W, where padded shards gave DDP
    one step more than one process, on a duplicated window."""
    for n in range(world * batch * accum, 80):
        single = train_loader(_windows(n), world * batch, 0, 1, seed=3, accum_steps=accum)
        ranks = [train_loader(_windows(n), batch, r, world, seed=3, accum_steps=accum) for r in range(world)]
        for loader in (single, *ranks):
            loader.set_epoch(2)
        # one process's optimizer step of W*B*accum windows holds the windows of the W ranks' step
        for step, (one, *parts) in enumerate(zip(*(_regroup(r, accum) for r in (single, *ranks)), strict=True)):
            together = [i for part in parts for i in part]
            assert sorted(together) == sorted(one) and len(set(together)) == len(together), (n, step)


def _regroup(loader, accum):
    """A rank's micro-batches of one accumulation group, as one list per optimizer step."""
    batches = [_ids(b) for b in loader]
    return [sum(batches[i:i + accum], []) for i in range(0, len(batches), accum)]


def test_training_drops_an_incomplete_last_batch_or_accumulation_group():
    ds = WindowDataset(torch.arange(100, dtype=torch.float32)[:, None], None, 0, 100, 4, direct_offsets(4, 2))
    assert train_loader(ds, 8, 0, 1, seed=0).batch_sizes() == [8] * 11              # 95 windows: 7 dropped
    assert train_loader(ds, 8, 0, 1, seed=0, accum_steps=3).batch_sizes() == [8] * 9  # whole groups of 24
    assert sum(len(b.x) for b in train_loader(ds, 8, 0, 1, seed=0)) == 88
    assert eval_loader(ds, 8, 0, 1).batch_sizes() == [8] * 11 + [7]                   # evaluation keeps all


@pytest.mark.parametrize("n,world,batch", [(95, 2, 8), (95, 3, 8), (7, 4, 2), (3, 8, 1), (40, 2, 8)])
def test_evaluation_deals_one_processs_batches_to_the_ranks(n, world, batch):
    """Each rank's batches are batches of one process at the same batch size; together every window once."""
    single = [_ids(b) for b in eval_loader(_windows(n), batch, 0, 1)]
    ranks = [[_ids(b) for b in eval_loader(_windows(n), batch, r, world)] for r in range(world)]
    assert sorted(b for r in ranks for b in r) == sorted(single)
    assert ranks[0] == single[0::world]


def test_dropping_incomplete_test_batches_counts_the_global_batch():
    """One process at batch 32 scores 2784 of ETTh1's 2785 test windows at horizon 96; two ranks at batch 16 each
    must score the same 2784, not the 2752 a cut of each rank's share left."""
    assert eval_windows(2785, 32, 1, drop_last=True) == eval_windows(2785, 16, 2, drop_last=True) == 2784
    ranks = [eval_loader(_windows(2785), 16, r, 2, drop_last=True) for r in range(2)]
    assert sum(len(b.x) for loader in ranks for b in loader) == 2784
    assert eval_windows(2785, 16, 2) == 2785


@pytest.mark.parametrize("n,world,step", [(94, 1, 1), (94, 2, 1), (94, 2, 8), (10, 4, 2), (30, 8, 1), (1, 1, 1)])
def test_shuffled_shards_follow_distributed_samplers_order_cut_to_whole_steps(n, world, step):
    for rank in range(world):
        shard = ShuffledShard(n, rank, world, seed=7, step_windows=step)
        sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=True, seed=7, drop_last=True)
        for epoch in (0, 3):
            shard.set_epoch(epoch)
            sampler.set_epoch(epoch)
            whole_steps = n // (world * step) * step
            assert shard.take(0, len(shard)).tolist() == list(sampler)[:whole_steps] and len(shard) == whole_steps


def test_autoregressive_targets_are_the_next_token_after_each_input_token():
    off = autoregressive_offsets(seq_len=12, input_token_len=4, output_token_len=3)
    assert off.tolist() == [4, 5, 6, 8, 9, 10, 12, 13, 14]
    assert torch.equal(autoregressive_offsets(12, 4, 4), torch.arange(4, 16))


def test_gather_matches_slicing_multivariate():
    data = torch.randn(50, 3)
    ds = WindowDataset(data, None, 10, 50, 8, autoregressive_offsets(8, 4, 4))
    assert len(ds) == 40 - 12 + 1
    batch = ds.gather(torch.tensor([0, 5, len(ds) - 1]))
    for row, i in enumerate([0, 5, len(ds) - 1]):
        s = 10 + i
        assert torch.equal(batch.x[row], data[s:s + 8])
        assert torch.equal(batch.y[row], data[s + 4:s + 12])


def test_gather_univariate_indexes_channel_then_start():
    data = torch.randn(30, 3)
    ds = WindowDataset(data, None, 0, 30, 5, direct_offsets(5, 2), univariate=True)
    n = 30 - 7 + 1
    assert len(ds) == 3 * n
    batch = ds.gather(torch.tensor([n + 4, 2 * n]))
    assert batch.x.shape == (2, 5, 1)
    assert torch.equal(batch.x[0, :, 0], data[4:9, 1]) and torch.equal(batch.y[0, :, 0], data[9:11, 1])
    assert torch.equal(batch.x[1, :, 0], data[0:5, 2])


def test_marks_cover_the_whole_window_for_rolling():
    data, marks = torch.randn(40, 2), torch.arange(40, dtype=torch.float32)[:, None]
    ds = WindowDataset(data, marks, 0, 40, 8, direct_offsets(8, 10))
    batch = ds.gather(torch.tensor([3]))
    assert batch.x_mark[0, :, 0].tolist() == list(range(3, 21))


def test_a_window_knows_the_row_of_its_first_point_in_the_whole_series():
    data = torch.randn(60, 3)
    assert WindowDataset(data, None, 20, 60, 8, direct_offsets(8, 4)).gather(torch.tensor([5, 0])).position.tolist() \
        == [25, 20]
    univariate = WindowDataset(data, None, 20, 60, 8, direct_offsets(8, 4), univariate=True)
    n = univariate.n_starts
    assert univariate.gather(torch.tensor([n + 3, 2 * n])).position.tolist() == [23, 20]


def test_model_inputs_give_each_step_of_a_rollout_its_marks_and_positions():
    """A future_marks model sees the calendar of its window and horizon, shifted with each rolled step; the
    step that reaches past the test horizon repeats the last calendar row."""
    args = SimpleNamespace(seq_len=8, output_token_len=4)
    marks = torch.arange(40, dtype=torch.float32)[:, None]
    ds = WindowDataset(torch.randn(40, 2), marks, 0, 40, 8, direct_offsets(8, 6))  # horizon 6: 2 steps of 4
    batch = ds.gather(torch.tensor([3]))
    caps = Capabilities(time_marks=True, future_marks=True, positions=True)
    (x, m), kwargs = model_inputs(args, caps, batch.x, batch, 4)
    assert x is batch.x and kwargs["position"].tolist() == [7]
    assert m[0, :, 0].tolist() == list(range(7, 17)) + [16, 16]
    (_, m), kwargs = model_inputs(args, Capabilities(time_marks=True), batch.x, batch, 0)
    assert m[0, :, 0].tolist() == list(range(3, 11)) and kwargs == {}


def test_split_bounds_give_val_and_test_a_lookback_of_seq_len_where_the_dataset_allows_it():
    rows = {"train": (0, 100), "val": (100, 130), "test": (130, 170)}
    assert split_bounds(rows, 20) == {"train": (0, 100), "val": (80, 130), "test": (110, 170)}
    assert split_bounds(rows, 20, lookback=False) == rows


def test_time_features_are_scaled_to_half_unit_range():
    import pandas as pd
    f = time_features(pd.date_range("2021-01-01", periods=100, freq="15min"), 100)
    assert f.shape == (100, 5) and f.min() >= -0.5 and f.max() <= 0.5
    assert time_features(None, 7).shape == (7, 1)


def test_an_epoch_of_drawn_windows_is_the_first_of_its_permutation_and_the_same_under_ranks():
    """SeriesWindows' epochs (the short-term task): per_epoch windows of a fresh permutation per epoch, cut to whole
    global steps; two ranks take exactly one process's windows, step by step."""
    one = ShuffledShard(1000, 0, 1, seed=7, step_windows=4, lazy=True, per_epoch=30)
    assert len(one) == 28  # 30 drawn, cut to whole steps of 4
    ranks = [ShuffledShard(1000, r, 2, seed=7, step_windows=2, lazy=True, per_epoch=30) for r in range(2)]
    for epoch in (0, 3):
        for shard in (one, *ranks):
            shard.set_epoch(epoch)
        mine = one.take(0, len(one))
        theirs = torch.stack([r.take(0, len(r)) for r in ranks], 1).flatten()
        assert torch.equal(mine, theirs)
        assert len(set(mine.tolist())) == 28 and int(mine.max()) < 1000
    one.set_epoch(0)
    first = one.take(0, 28)
    one.set_epoch(1)
    assert not torch.equal(first, one.take(0, 28)), "each epoch draws anew"
    assert len(ShuffledShard(1000, 0, 2, seed=7, step_windows=64, lazy=True, per_epoch=30)) == 64, \
        "an epoch holds at least one global step"


def test_indices_reach_a_gpu_from_pinned_memory_without_a_stream_sync(monkeypatch):
    """A plain copy from pageable memory to a GPU synchronises the stream once per gather (the first H200 check found
    our loop 19-21% behind the model-only limit for DLinear and iTransformer); to_device pins the indices and copies
    them asynchronously. On the CPU nothing changes. The copies are recorded here, as no GPU is at hand."""
    copies, pinned = [], []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: pinned.append(self) or self)
    monkeypatch.setattr(torch.Tensor, "to", lambda self, device, non_blocking=False: copies.append(
        (torch.device(device).type, non_blocking)) or self)
    idx = torch.arange(4)
    to_device(idx, torch.device("cuda", 0))
    to_device(idx, torch.device("cpu"))
    assert copies == [("cuda", True), ("cpu", False)] and len(pinned) == 1
