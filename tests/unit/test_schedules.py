"""Learning rates: scaling with the world size, the schedules (TSLib's, PatchTST's, torch's OneCycle), warm-up and
resuming a schedule."""
import math

import pytest
import torch
from torch import nn

from utils.schedules import ScheduleContext, build_scheduler, registry, warmup_factor, world_factor


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


@pytest.mark.parametrize("name, decay", [("type3_08_official", 0.8), ("type3_official", 0.9)])
def test_type3_official_is_the_official_loop_with_its_unstepped_one_cycle(name, decay):
    """SegRNN's official loop (x0.8) and PatchTST's and PDF's (x0.9): Adam, a OneCycleLR built and never stepped,
    adjust_learning_rate(epoch + 1) after each epoch (type3: x decay from its epoch 4); per step, the same lr and the
    same Adam betas."""
    lr, steps = 3e-4, 3
    reference = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=lr)
    torch.optim.lr_scheduler.OneCycleLR(reference, max_lr=lr, steps_per_epoch=steps, epochs=30, pct_start=0.3)
    ours = torch.optim.Adam([nn.Parameter(torch.zeros(1))], lr=lr)
    scheduler = build_scheduler(ours, name, ScheduleContext(steps, 30, lr, 0.3), 1.0, 0.0)
    for epoch in range(8):
        for _ in range(steps):
            assert ours.param_groups[0]["lr"] == pytest.approx(reference.param_groups[0]["lr"], rel=1e-12)
            assert ours.param_groups[0]["betas"] == reference.param_groups[0]["betas"] == (0.95, 0.999)
            scheduler.step()
        reference.param_groups[0]["lr"] = lr if epoch + 1 < 3 else lr * decay ** (epoch + 1 - 3)
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
