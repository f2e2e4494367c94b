"""Pure functions: sharding with a fake (rank, world), window indexing, lr scaling, dropout, early stopping,
metrics."""
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DistributedSampler

from data_provider.factory import split_bounds, time_features
from models.contract import model_inputs
from models.base import Capabilities
from data_provider.windows import (ShuffledShard, WindowDataset, autoregressive_offsets, direct_offsets,
                                   eval_loader, eval_windows, train_loader)
from models.layers.dropout import LEVELS, Dropout
from utils import checkpoint
from utils.dist import global_mean
from utils.early_stopping import EarlyStopping
from utils.errors import ConfigError
from utils.metrics import metrics_from_windows, window_errors
from utils.schedules import ScheduleContext, build_scheduler, registry, warmup_factor, world_factor


# ---- sharding: a fake (rank, world) against one process --------------------------------------
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


# ---- window indexing ---------------------------------------------------------------------------
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


# ---- lr scaling, schedules, warm-up ------------------------------------------------------------
def test_world_factor():
    assert world_factor("linear", 8) == 8 and world_factor("sqrt", 4) == 2 and world_factor("none", 8) == 1


def _per_epoch(name, epochs, learning_rate=1e-3, train_epochs=10):
    """The factor of each of the first epochs (one step per epoch)."""
    context = ScheduleContext(1, train_epochs, learning_rate, 0.2)
    return [registry()[name].factor(e, context) for e in range(epochs)]


def test_type1_matches_tslib_timing_and_type3_matches_patchtst():
    assert _per_epoch("type1", 5) == [1, 1, 0.5, 0.25, 0.125]
    assert [round(f, 6) for f in _per_epoch("type3", 7)] == [1, 1, 1, 1, 0.9, 0.81, 0.729]
    assert [round(f, 6) for f in _per_epoch("type3_08", 6)] == [1, 1, 1, 1, 0.8, 0.64]  # SparseTSF, SegRNN
    official, lr, crossformer = {2: 1 / 2, 4: 1 / 4, 6: 1 / 8, 8: 1 / 16, 10: 1 / 32}, 1.0, []
    for epoch in range(13):  # Crossformer's loop: adjust_learning_rate(epoch + 1) with its own table after each epoch
        crossformer.append(lr)
        lr = official.get(epoch + 1, lr)
    assert _per_epoch("type1_crossformer", 13) == crossformer
    assert _per_epoch("type2", 5, 1e-4)[1] == 1 and _per_epoch("type2", 5, 1e-4)[4] == pytest.approx(0.1)
    assert _per_epoch("cosine", 6, 1e-4)[5] == pytest.approx(0.5)
    assert _per_epoch("constant", 10) == [1] * 10


def test_type3_08_official_is_the_official_loop_with_its_unstepped_one_cycle():
    """SegRNN's official loop: Adam, a OneCycleLR built and never stepped, adjust_learning_rate(epoch + 1) after
    each epoch (type3: x0.8 from its epoch 4); per step, the same lr and the same Adam betas."""
    lr, steps = 3e-4, 3
    reference = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=lr)
    torch.optim.lr_scheduler.OneCycleLR(reference, max_lr=lr, steps_per_epoch=steps, epochs=30, pct_start=0.3)
    ours = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = build_scheduler(ours, "type3_08_official", ScheduleContext(steps, 30, lr, 0.3), 1.0, 0.0)
    for epoch in range(8):
        for _ in range(steps):
            assert ours.param_groups[0]["lr"] == pytest.approx(reference.param_groups[0]["lr"], rel=1e-12)
            assert ours.param_groups[0]["betas"] == reference.param_groups[0]["betas"] == (0.95, 0.999)
            scheduler.step()
        reference.param_groups[0]["lr"] = lr if epoch + 1 < 3 else lr * 0.8 ** (epoch + 1 - 3)
    assert torch.optim.Adam([nn.Parameter(torch.zeros(1))]).param_groups[0]["betas"] == (0.9, 0.999)
    plain = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=lr)
    build_scheduler(plain, "type3_08", ScheduleContext(steps, 30, lr, 0.3), 1.0, 0.0)
    assert plain.param_groups[0]["betas"] == (0.9, 0.999)  # the other schedules leave Adam's defaults


def test_tst_is_torchs_one_cycle_stepped_every_batch():
    """TSLib builds OneCycleLR(steps_per_epoch, pct_start, epochs, max_lr=learning_rate) on Adam and steps it per
    batch: per step, the same lr and the same Adam betas (its cycle_momentum moves beta1 against the lr)."""
    reference = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=1e-3)
    one_cycle = torch.optim.lr_scheduler.OneCycleLR(reference, max_lr=1e-3, steps_per_epoch=7, epochs=5,
                                                    pct_start=0.3)
    ours = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=1e-3)
    scheduler = build_scheduler(ours, "TST", ScheduleContext(7, 5, 1e-3, 0.3), 1.0, 0.0)
    beta1s = []
    for _ in range(35):
        assert ours.param_groups[0]["lr"] == pytest.approx(reference.param_groups[0]["lr"], rel=1e-9)
        assert ours.param_groups[0]["betas"] == pytest.approx(reference.param_groups[0]["betas"], rel=1e-12)
        beta1s.append(ours.param_groups[0]["betas"][0])
        reference.step()
        one_cycle.step()
        scheduler.step()
    assert beta1s[0] == 0.95 and min(beta1s) == pytest.approx(0.85, abs=1e-3) and beta1s[-1] == pytest.approx(0.95)
    resumed = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=1e-3)
    build_scheduler(resumed, "TST", ScheduleContext(7, 5, 1e-3, 0.3), 1.0, 0.0).load_state_dict({"steps": 10,
                                                                                          "base_lrs": [1e-3]})
    assert resumed.param_groups[0]["betas"][0] == beta1s[10], "a resumed run continues the cycle where it stood"


def test_warmup_cosine_rises_linearly_then_falls_to_zero():
    context = ScheduleContext(steps_per_epoch=10, train_epochs=10, learning_rate=1e-3, pct_start=0.1)
    factors = [registry()["warmup_cosine"].factor(step, context) for step in range(100)]
    assert factors[:10] == pytest.approx([(i + 1) / 10 for i in range(10)])
    assert factors[10] == 1 and factors[55] == pytest.approx(0.5) and 0 < factors[-1] < 1e-3
    assert all(a >= b for a, b in zip(factors[10:], factors[11:]))


def test_warmup_ramps_from_single_process_lr_to_scaled_lr():
    assert warmup_factor(0, 10, 4.0) == 0.25 and warmup_factor(5, 10, 4.0) == pytest.approx(0.625)
    assert warmup_factor(10, 10, 4.0) == 1 and warmup_factor(3, 10, 1.0) == 1


def test_scheduler_combines_scaling_warmup_and_epoch_schedule():
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1e-3 * 4)  # learning_rate 1e-3, world 4, linear scaling
    sched = build_scheduler(opt, "type1", ScheduleContext(5, 10, 1e-3, 0.2), 4.0, warmup_epochs=1)
    lrs = []
    for _ in range(15):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(1e-3)           # warm-up starts at the single-process lr
    assert lrs[5] == pytest.approx(4e-3)           # epoch 1: fully scaled
    assert lrs[10] == pytest.approx(2e-3)          # epoch 2: type1 halves


def test_scheduler_resumed_from_its_state_continues_the_same_lr_sequence():
    def run(resume_at=None):
        opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=2e-3)
        sched = build_scheduler(opt, "cosine", ScheduleContext(3, 4, 1e-3, 0.2), 2.0, warmup_epochs=1)
        lrs = []
        for step in range(12):
            if step == resume_at:  # a fresh optimizer and schedule, as a restarted job builds them
                state, opt = sched.state_dict(), torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=2e-3)
                sched = build_scheduler(opt, "cosine", ScheduleContext(3, 4, 1e-3, 0.2), 2.0, warmup_epochs=1)
                sched.load_state_dict(state)
            lrs.append(opt.param_groups[0]["lr"])
            sched.step()
        return lrs, sched.get_last_lr()

    lrs, last = run()
    # warm-up from the single-process lr, then the scaled lr along the cosine of the epoch
    assert lrs[0] == pytest.approx(1e-3) and lrs[3] == pytest.approx(1e-3 * (1 + math.cos(math.pi / 4)))
    assert lrs[6] == pytest.approx(1e-3)
    assert run(resume_at=5) == (lrs, last) and last == [pytest.approx(0.0)]  # cosine ends at 0 after 4 epochs


# ---- dropout -----------------------------------------------------------------------------------
def test_cpu_dropout_drops_independently_with_probability_p_and_keeps_the_mean():
    torch.manual_seed(0)
    n, p = 1 << 20, 0.3
    out = Dropout(p).train()(torch.ones(n))
    dropped = out == 0
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(dropped.double().mean().item() - p) < 5 * sigma
    assert torch.all(out[~dropped] == 1 / (1 - round(p * LEVELS) / LEVELS))  # the exact inverse keep rate
    assert abs(out.double().mean().item() - 1) < 5 * sigma / (1 - p)
    # the four words of one 64-bit draw are independent: neighbours agree as often as two coin flips
    agree = (dropped[0::2] == dropped[1::2]).double().mean().item()
    assert abs(agree - (p * p + (1 - p) * (1 - p))) < 5 * math.sqrt(0.5 / (n / 2))


def test_cpu_dropout_follows_the_seed_backpropagates_through_its_mask_and_keeps_the_dtype():
    layer = Dropout(0.5).train()
    x = torch.randn(3, 50, requires_grad=True)
    torch.manual_seed(1)
    first = layer(x)
    first.sum().backward()
    torch.manual_seed(1)
    assert torch.equal(layer(x), first) and not torch.equal(layer(x), first)
    assert torch.equal(x.grad, torch.where(first == 0, 0.0, 2.0))
    assert layer(x.detach().bfloat16()).dtype == torch.bfloat16
    assert torch.equal(layer.eval()(x), x) and torch.equal(Dropout(0.0).train()(x), x)


def test_compiled_dropout_uses_torch_dropout():
    layer = torch.compile(Dropout(0.5).train())
    out = layer(torch.ones(4096))
    assert set(out.unique().tolist()) == {0.0, 2.0} and 0.4 < (out == 0).double().mean().item() < 0.6


# ---- early stopping ----------------------------------------------------------------------------
def test_early_stopping_counts_epochs_without_improvement():
    es = EarlyStopping(patience=2)
    assert es.step(1.0, 0) and not es.step(1.2, 1) and es.step(0.9, 2)
    assert not es.step(0.95, 3) and not es.stop and not es.step(0.95, 4) and es.stop
    assert es.best_epoch == 2 and es.best == 0.9


def test_early_stopping_nan_is_never_best_and_state_round_trips():
    es = EarlyStopping(patience=1)
    es.step(0.5, 0)
    assert not es.step(float("nan"), 1) and es.stop
    other = EarlyStopping(patience=1)
    other.load_state_dict(es.state_dict())
    assert other.state_dict() == es.state_dict()


# ---- metrics and reductions --------------------------------------------------------------------
def test_metrics_from_window_errors_equal_whole_array_metrics_and_shards_change_nothing():
    pred, true = torch.randn(37, 6, 2), torch.randn(37, 6, 2) + 3
    errors = window_errors(pred, true)
    whole = metrics_from_windows(errors)
    p, t = pred.double().numpy(), true.double().numpy()
    assert whole["mse"] == pytest.approx(np.mean((p - t) ** 2), rel=1e-12)
    assert whole["mape"] == pytest.approx(np.mean(np.abs((p - t) / t)), rel=1e-12)
    assert whole["rmse"] == pytest.approx(math.sqrt(whole["mse"]))
    assert errors[:, 0].numpy() == pytest.approx(((p - t) ** 2).mean(axis=(1, 2)), rel=1e-12)
    parts = torch.cat([window_errors(pred[s], true[s]) for s in (slice(0, 10), slice(10, 11), slice(11, 37))])
    assert torch.equal(parts, errors)  # a window's errors do not depend on the batch it was scored in


def test_global_mean_single_process_is_sum_over_count():
    assert global_mean(torch.tensor(6.0), torch.tensor(4)).item() == 1.5


# ---- checkpoints -------------------------------------------------------------------------------
def test_trainable_state_skips_frozen_parameters_and_loads_strictly():
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), nn.Linear(2, 1))
    model[0].weight.requires_grad_(False)
    state = checkpoint.trainable_state(model)
    assert "0.weight" not in state and "1.running_mean" in state
    fresh = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), nn.Linear(2, 1))
    fresh[0].weight.requires_grad_(False)
    checkpoint.load_trainable_state(fresh, {f"module.{k}": v for k, v in state.items()})
    assert torch.equal(fresh[2].weight, model[2].weight)
    del state["2.bias"]
    with pytest.raises(ConfigError, match="missing"):
        checkpoint.load_trainable_state(fresh, state)


def test_atomic_save_and_safe_load(tmp_path):
    path = str(tmp_path / "c.pth")
    checkpoint.save_atomic({"w": torch.ones(2), "epoch": 3}, path)
    assert checkpoint.load(path, torch.device("cpu"))["epoch"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["c.pth"]


# ---- readers and the data factory --------------------------------------------------------------
def _args(**kw):
    from exp.config import parse_args, resolve
    flags = [token for k, v in kw.items() for token in (f"--{k}", str(v))]
    return resolve(parse_args(["--seq_len", "96", "--input_token_len", "48", "--output_token_len", "24", *flags]))


def test_ett_uses_the_standard_borders_and_scales_on_train_only(tmp_path):
    from data_provider import synthetic
    from data_provider.factory import build_data
    frame = synthetic.generate(length=20 * 30 * 24 + 50, n_covariates=2, seed=0)
    synthetic.write_csv(frame, str(tmp_path / "ETTh1.csv"))
    bundle = build_data(_args(data="ETTh1", root_path=str(tmp_path)), torch.device("cpu"), True, False)
    train, val, test = (bundle.datasets[s] for s in ("train", "val", "test"))
    month = 30 * 24
    assert train.n_windows == 12 * month - 96 - 24 + 1
    assert val.n_windows == 4 * month - 24 + 1 and test.n_windows == 4 * month - 24 + 1
    train_rows = frame.iloc[:12 * month, 1:].to_numpy()
    assert np.allclose(bundle.scaler.mean, train_rows.mean(0)) and bundle.columns[-1] == "OT"
    assert torch.allclose(train.series[:12 * month].mean(0), torch.zeros(3), atol=1e-4)
    # row-major although pandas hands out column-major values: a window is one contiguous run of rows
    assert train.series.is_contiguous() and train.gather(torch.tensor([7, 0, 100])).x.stride() == (120 * 3, 3, 1)


def test_standard_scale_matches_sklearn_and_centres_a_constant_channel():
    from sklearn.preprocessing import StandardScaler

    from data_provider.factory import StandardScale
    rng = np.random.default_rng(0)
    rows = np.column_stack([rng.normal(5.0, 3.0, 500), np.full(500, 0.1), rng.integers(0, 9, 500)])
    ours, reference = StandardScale.fit(rows), StandardScaler().fit(rows)
    assert np.allclose(ours.std, reference.scale_, rtol=1e-14, atol=0)
    assert np.allclose(ours.mean, reference.mean_, rtol=1e-14, atol=0)
    values = rng.normal(size=(50, 3)) * 10
    assert np.allclose(ours.transform(values), reference.transform(values), rtol=1e-14, atol=0)
    assert ours.std[1] == 1.0 and np.allclose(ours.transform(rows)[:, 1], 0.0)


def test_custom_csv_moves_the_target_last_and_npy_reads_raw_arrays(tmp_path):
    import pandas as pd
    from data_provider.readers import read_by_extension
    frame = pd.DataFrame({"date": pd.date_range("2020", periods=100, freq="D"), "OT": np.arange(100.0),
                          "x": np.ones(100)})
    frame.to_csv(tmp_path / "c.csv", index=False)
    table = read_by_extension(str(tmp_path / "c.csv"), "OT")
    assert table.columns == ["x", "OT"] and table.values[5, 1] == 5 and len(table.dates) == 100
    np.save(tmp_path / "a.npy", np.arange(30.0).reshape(10, 3))
    table = read_by_extension(str(tmp_path / "a.npy"), None)
    assert table.values.shape == (10, 3) and table.dates is None


def test_optimizer_skips_frozen_parameters(tmp_path):
    from data_provider.factory import DataBundle
    from exp.experiment import Experiment
    from exp.identity import RunIdentity, RunPlan
    from utils.dist import DistEnv

    class Frozen(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone, self.head = nn.Linear(4, 4), nn.Linear(4, 2)
            self.backbone.requires_grad_(False)

    data = torch.randn(60, 1)
    ds = WindowDataset(data, None, 0, 60, 4, direct_offsets(4, 2))
    bundle = DataBundle("toy", {"train": ds, "val": ds, "test": ds}, 1, 0, ["a"], None, "toy.csv", "0-0")
    env = DistEnv(0, 0, 1, torch.device("cpu"), "gloo", False)
    plan = RunPlan(RunIdentity("toy", "0", 0, {}), str(tmp_path), str(tmp_path), "tp24", True, None, False, "")
    exp = Experiment(_args(results_dir=str(tmp_path)), env, bundle, Frozen(), plan)
    params = exp.trainer.state.optimizer.param_groups[0]["params"]
    assert len(params) == 2 and all(p.requires_grad for p in params)


def test_a_checkpoint_write_that_fails_mid_file_surfaces_as_the_os_error():
    """torch's zip writer turns a failed write into a RuntimeError without the cause, depending on where the
    disk fills up; the checkpoint writer re-raises the OSError, which write_atomic makes one line."""
    import errno

    from utils.checkpoint import _save

    class FullAfter:
        def __init__(self, limit):
            self.written, self.limit = 0, limit

        def write(self, data):
            if self.written + len(data) > self.limit:
                raise OSError(errno.EFBIG, "File too large")
            self.written += len(data)
            return len(data)

        def flush(self):
            pass

    payload = {"weights": torch.zeros(3000), "args": {f"flag{i}": "x" * 10 for i in range(300)}}
    for limit in (100, 5000, 9000):
        with pytest.raises(OSError, match="File too large"):
            _save(payload, FullAfter(limit))


# ---- series decomposition ---------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", [1, 4, 25])
def test_the_moving_average_is_avg_pool_over_the_replicated_ends_rounded_once(kernel):
    """Window sums from one running sum in float64: avg_pool1d's moving average computed in float64 and rounded
    once to float32 (avg_pool1d in float32 rounds at each of its k additions), values and gradients; also far
    from zero over a long series, where a float32 running sum would lose digits."""
    import torch.nn.functional as F
    from models.layers.decomposition import SeriesDecomposition

    def exact(x):
        flat = x.double().reshape(-1, 1, x.shape[-1])
        trend = F.avg_pool1d(F.pad(flat, (kernel // 2, (kernel - 1) // 2), mode="replicate"), kernel, stride=1)
        return trend.reshape(x.shape)

    generator = torch.Generator().manual_seed(0)
    for x in (torch.randn(3, 7, 96, generator=generator), 1000 + torch.randn(2, 5000, generator=generator)):
        x.requires_grad_(True)
        seasonal, trend = SeriesDecomposition(kernel)(x)
        expected = exact(x)
        torch.testing.assert_close(trend, expected.float(), rtol=1.2e-7, atol=0)  # one rounding: half an ulp
        ulp = torch.finfo(torch.float32).eps * x.detach().abs().max()
        torch.testing.assert_close(seasonal, (x.double() - expected).float(), rtol=0, atol=float(ulp))
        weights = torch.randn(x.shape, generator=generator)
        ours, = torch.autograd.grad((trend * weights).sum(), x)
        theirs, = torch.autograd.grad((expected * weights.double()).sum(), x)
        torch.testing.assert_close(ours, theirs.float(), rtol=1e-6, atol=1e-7)


# ---- TimesNet's inception block --------------------------------------------------------------------
@pytest.mark.parametrize("num_kernels", [1, 2, 6])
def test_the_inception_block_is_the_mean_of_its_convolutions_in_values_and_gradients(num_kernels):
    """One convolution with the mean of the zero-padded kernels equals the paper's mean of 'same' convolutions
    (computed in float64 to compare the mathematics, not the rounding), on folds narrower or shorter than the
    largest kernel (which it crops) and on one larger in both directions."""
    from models.timesnet import InceptionBlock

    torch.manual_seed(0)
    block = InceptionBlock(3, 5, num_kernels).double()
    for conv in block.convs:
        torch.nn.init.normal_(conv.bias)  # zero at initialisation: the bias' mean must be tested too
    for shape in ((2, 3, 1, 24), (2, 3, 4, 6), (1, 3, 13, 2), (1, 3, 12, 14)):
        x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        ours = block(x)
        theirs = torch.stack([conv(x) for conv in block.convs], dim=-1).mean(-1)
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
        weights = torch.randn_like(ours)
        inputs = [x, *block.parameters()]
        for a, b in zip(torch.autograd.grad((ours * weights).sum(), inputs),
                        torch.autograd.grad((theirs * weights).sum(), inputs), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


# ---- Autoformer's Auto-Correlation -----------------------------------------------------------------
@pytest.mark.parametrize("training", [True, False])
def test_auto_correlation_sums_the_values_rolled_by_each_top_delay_as_the_official_code(training):
    """The one-FFT-product aggregation equals the official per-delay torch.roll sum (time_delay_agg_training:
    the batch's top delays; _inference: each window's own), values and gradients, in float64."""
    import math

    from models.autoformer import AutoCorrelation

    def official(q, k, v, factor):
        B, L = q.shape[:2]
        corr = torch.fft.irfft(torch.fft.rfft(q, dim=1) * torch.fft.rfft(k, dim=1).conj(), n=L, dim=1).mean((2, 3))
        top_k = int(factor * math.log(L))
        if training:
            delays = torch.topk(corr.detach().mean(0), top_k).indices
            weights = torch.softmax(corr[:, delays], dim=-1)
            return sum(torch.roll(v, -int(d), 1) * weights[:, i, None, None, None] for i, d in enumerate(delays))
        weights, delays = torch.topk(corr, top_k, dim=-1)
        weights = torch.softmax(weights, dim=-1)
        rolled = [torch.stack([torch.roll(v[b], -int(delays[b, i]), 0) for b in range(B)]) for i in range(top_k)]
        return sum(r * weights[:, i, None, None, None] for i, r in enumerate(rolled))

    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 40, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    layer = AutoCorrelation(factor=3).train(training)
    ours = layer(q, k, v).double().view(3, 40, 2, 4)
    theirs = official(q, k, v, 3)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)  # the FFTs run in float32, as under AMP
    weights = torch.randn_like(ours)
    for a, b in zip(torch.autograd.grad((ours * weights).sum(), (q, k, v)),
                    torch.autograd.grad((theirs * weights).sum(), (q, k, v)), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


# ---- Crossformer's attention ---------------------------------------------------------------------
@pytest.mark.parametrize("head_mixup", [False, True])
@pytest.mark.parametrize("cross", [False, True])
def test_crossformer_attention_is_the_official_attention_layer(head_mixup, cross):
    """The official AttentionLayer with separate projections: since c10c8ea it merges (B, L, H, E) heads as
    (B, L, H * E); before, with mix, it transposed them to (B, H, L, E) first (head_mixup)."""
    from models.crossformer import Attention

    def official(layer, queries, keys):
        D, H = queries.shape[-1], layer.n_heads
        w, b = layer.qkv.weight, layer.qkv.bias
        q, k, v = (F.linear(x, w[i * D:(i + 1) * D], b[i * D:(i + 1) * D]).unflatten(-1, (H, -1))
                   for i, x in enumerate((queries, keys, keys)))
        scores = torch.softmax(torch.einsum("blhe,bshe->bhls", q, k) / (D // H) ** 0.5, dim=-1)
        out = torch.einsum("bhls,bshd->blhd", scores, v)
        out = out.transpose(2, 1) if head_mixup else out
        return layer.out(out.reshape(queries.shape[0], queries.shape[1], -1))

    torch.manual_seed(0)
    layer = Attention(16, 4, 0.0, head_mixup).double().eval()
    x, memory = torch.randn(3, 5, 16, dtype=torch.float64), torch.randn(3, 7, 16, dtype=torch.float64)
    ours = layer(x, memory) if cross else layer(x)
    torch.testing.assert_close(ours, official(layer, x, memory if cross else x), rtol=0, atol=1e-12)
    mixed = Attention(16, 4, 0.0, not head_mixup).double().eval()
    mixed.load_state_dict(layer.state_dict())
    assert not torch.allclose(mixed(x, memory) if cross else mixed(x), ours)  # the two merges are other functions


def test_crossformer_tslib_embedding_adds_a_fixed_sine_table_and_no_bias():
    """TSLib's segment embedding, Linear(seg_len, d_model, bias=False)(x) + sinusoid + learnable positions: the
    default model computes the same once its positions absorb the sine table and its embedding bias is zero."""
    import models
    from models.layers.embed import sinusoidal_positions
    torch.manual_seed(0)
    task = dict(seq_len=24, input_token_len=24, output_token_len=12, enc_in=3, n_marks=0, covariate=False)
    hp = dict(seg_len=6, win_size=2, router_factor=2, d_model=16, d_ff=16, n_heads=2, e_layers=2, dropout=0.0,
              baseline=False, head_mixup=False)
    tslib = models.build("crossformer", task, {**hp, "tslib_embedding": True}).double().eval()
    default = models.build("crossformer", task, {**hp, "tslib_embedding": False}).double().eval()
    assert tslib.embed.bias is None
    state = tslib.state_dict()
    state["enc_position"] = state["enc_position"] + sinusoidal_positions(4, 16).double()
    default.load_state_dict({**state, "embed.bias": torch.zeros(16, dtype=torch.float64)})
    x = torch.randn(5, 24, 3, dtype=torch.float64)
    torch.testing.assert_close(tslib(x), default(x), rtol=0, atol=1e-12)
    default.load_state_dict({**tslib.state_dict(), "embed.bias": torch.zeros(16, dtype=torch.float64)})
    assert not torch.allclose(tslib(x), default(x))  # the table is what differs


def test_partial_rotary_rotates_the_leading_features_and_passes_the_rest():
    from models.layers.transformer import apply_rotary, rotary_tables
    x = torch.randn(2, 3, 5, 16)
    cos, sin = rotary_tables(torch.arange(5), 8)  # tables 4 wide: features 0..7 rotate
    out = apply_rotary(x, cos, sin)
    assert torch.equal(out[..., 8:], x[..., 8:])
    assert torch.allclose(out[..., :8], apply_rotary(x[..., :8], cos, sin))
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # a rotation


def _openltm_time_attention(x, layer, bias, n_vars, n_tokens):
    """OpenLTM's TimeAttention (0b30050) transcribed from its code: rotary with interleaved pairs (2i, 2i + 1) over
    the first half of each head at the flattened token index, the binary bias (rows: other, same variable) added to
    the scores before their scaling, a multivariate causal mask in time."""
    B, S, D = x.shape
    H = layer.n_heads
    E = D // H
    q, k, v = layer.qkv(x).view(B, S, 3, H, E).permute(2, 0, 3, 1, 4)
    width = E // 2
    theta = 10000.0 ** (-torch.arange(0, width, 2).float() / width)
    angle = torch.arange(S).float()[:, None] * theta.repeat_interleave(2)[None, :]

    def rotate(t):
        part, rest = t[..., :width], t[..., width:]
        swapped = torch.stack([-part[..., 1::2], part[..., 0::2]], dim=-1).flatten(-2)
        return torch.cat([part * angle.cos() + swapped * angle.sin(), rest], dim=-1)

    time = torch.arange(n_tokens).repeat(n_vars)
    var = torch.arange(n_vars).repeat_interleave(n_tokens)
    same = (var[:, None] == var[None, :]).float()
    scores = torch.einsum("bhle,bhse->bhls", rotate(q), rotate(k))
    scores = scores + (1 - same) * bias[0][:, None, None] + same * bias[1][:, None, None]
    scores = scores.masked_fill(time[:, None] < time[None, :], float("-inf"))
    out = torch.einsum("bhls,bhsd->blhd", torch.softmax(scores / math.sqrt(E), dim=-1), v).reshape(B, S, D)
    return layer.out(out)


def test_timer_xl_openltm_form_is_openltms_attention_on_permuted_features():
    """With each head's rotated features reordered from OpenLTM's interleaved pairs to ours, a one-layer Timer-XL of
    the openltm form computes OpenLTM's attention (transcribed above) inside the same post-norm layer."""
    import models
    torch.manual_seed(0)
    n_vars, n_tokens, P, D, H = 3, 4, 8, 32, 4
    task = dict(seq_len=n_tokens * P, input_token_len=P, output_token_len=P, enc_in=n_vars, n_marks=0, covariate=False)
    model = models.build("timer_xl", task, dict(d_model=D, n_heads=H, e_layers=2, d_ff=64, dropout=0.0,
                                                activation="relu", use_norm=False, attention_form="openltm")).eval()
    assert model.variable_bias.shape == (2, 2, H)  # a bias per layer, drawn from N(0, 1)
    E = D // H
    ours_from_openltm = [2 * i for i in range(E // 4)] + [2 * i + 1 for i in range(E // 4)] + list(range(E // 2, E))
    x = torch.randn(2, n_tokens * P, n_vars)
    h = model.embedding(x.transpose(1, 2).unfold(-1, P, P)).reshape(2, n_vars * n_tokens, D)
    expected = h
    for layer, bias in zip(model.layers, model.variable_bias):
        reference = type(layer.attention)(D, H, 0.0)
        reference.load_state_dict(layer.attention.state_dict())
        with torch.no_grad():  # OpenLTM's feature order for q and k: the inverse of ours_from_openltm
            for part in (reference.qkv.weight, reference.qkv.bias):
                rows = part.view(3, H, E, *part.shape[1:])
                rows[:2, :, ours_from_openltm] = rows[:2].clone()
        attention = _openltm_time_attention(expected, reference, bias.flip(0), n_vars, n_tokens)
        expected = layer.norm1(expected + attention)
        expected = layer.norm2(expected + layer.ffn(expected))
    expected = model.head(model.norm(expected)).reshape(2, n_vars, n_tokens * P).transpose(1, 2)
    assert torch.allclose(model(x), expected, atol=1e-5)
