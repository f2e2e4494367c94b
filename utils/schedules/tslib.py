"""The schedules of Time-Series-Library and the papers' code (`--lradj`).

The reference code calls adjust_learning_rate(epoch + 1) after each epoch, so its per-epoch schedules start
one epoch late; these reproduce that timing. TST is the OneCycle schedule TSLib steps every batch for
PatchTST and TimeMixer (torch's OneCycleLR with its defaults and max_lr = the learning rate).
"""
import math

from utils.schedules import ScheduleContext, Schedule, per_epoch

# type2's absolute learning rates (TSLib), keyed by the 0-based epoch from which they apply
_TYPE2 = {2: 5e-5, 4: 1e-5, 6: 5e-6, 8: 1e-6, 10: 5e-7, 15: 1e-7, 20: 5e-8}
ONE_CYCLE_DIV, ONE_CYCLE_FINAL_DIV = 25.0, 1e4  # OneCycleLR's div_factor and final_div_factor
# OneCycleLR's max_momentum and base_momentum: Adam's beta1 from the moment it is built, and at the lr's peak
ONE_CYCLE_MAX_MOMENTUM, ONE_CYCLE_BASE_MOMENTUM = 0.95, 0.85


def _type2(epoch: int, h: ScheduleContext) -> float:
    reached = [k for k in _TYPE2 if k <= epoch]
    return _TYPE2[max(reached)] / h.learning_rate if reached else 1.0


def _type1_crossformer(epoch: int, h: ScheduleContext) -> float:
    """Crossformer's own type1 table: lr x 0.5^k after epoch 2k (k = 1..5), i.e. halved every two epochs to 1/32."""
    return 0.5 ** min(epoch // 2, 5)


def _type3_08(epoch: int, h: ScheduleContext) -> float:
    return 0.8 ** max(epoch - 3, 0)


def _unstepped_one_cycle(schedule):
    """`schedule` as PatchTST's official loop (and those built on it) trains it: the loop builds a OneCycleLR it steps
    only under TST, and building it leaves the first epoch at lr/25."""
    return lambda epoch, h: 1 / ONE_CYCLE_DIV if epoch == 0 else schedule(epoch, h)


def _type3(epoch: int, h: ScheduleContext) -> float:
    return 0.9 ** max(epoch - 3, 0)


def _cosine_between(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2 * (math.cos(math.pi * pct) + 1)


def _one_cycle_phases(step: int, h: ScheduleContext, start: float, peak: float, end: float) -> float:
    """OneCycleLR's two cosine phases from start to peak over pct_start of the steps, then to end (held after)."""
    peak_step, last_step = h.pct_start * h.total_steps - 1, h.total_steps - 1
    if step <= peak_step:
        return _cosine_between(start, peak, step / peak_step)
    return _cosine_between(peak, end, min((step - peak_step) / (last_step - peak_step), 1.0))


def one_cycle(step: int, h: ScheduleContext) -> float:
    """OneCycleLR's lr / max_lr: a rise from 1/25 to 1, then a fall to 1/(25 x 1e4)."""
    return _one_cycle_phases(step, h, 1 / ONE_CYCLE_DIV, 1.0, 1 / (ONE_CYCLE_DIV * ONE_CYCLE_FINAL_DIV))


def one_cycle_beta1(step: int, h: ScheduleContext) -> float:
    """OneCycleLR's cycle_momentum on Adam: beta1 falls from 0.95 to 0.85 as the lr rises, and rises back."""
    return _one_cycle_phases(step, h, ONE_CYCLE_MAX_MOMENTUM, ONE_CYCLE_BASE_MOMENTUM, ONE_CYCLE_MAX_MOMENTUM)


SCHEDULES = [
    per_epoch("type1", lambda e, h: 0.5 ** max(e - 1, 0), "1, 1, 1/2, 1/4, ... per epoch (TSLib, DLinear)"),
    per_epoch("type1_crossformer", _type1_crossformer,
              "1, 1, 1/2, 1/2, 1/4, 1/4, ... per epoch, 1/32 from epoch 11 (type1 of Crossformer's official code)"),
    per_epoch("type1_micn", lambda e, h: 0.75 ** max(e - 1, 0),
              "1, 1, 0.75, 0.5625, ... per epoch (type1 of MICN's official code)"),
    per_epoch("type4", lambda e, h: 0.995 ** max(e - 1, 0),
              "1, 1, 0.995, 0.995^2, ... per epoch (FiLM's official code)"),
    per_epoch("type2", _type2, "TSLib's table: 5e-5 from epoch 3, 1e-5 from epoch 5, ... (x world factor)"),
    per_epoch("type3", _type3, "1, 1, 1, 1, 0.9, 0.81, ... per epoch (PatchTST)"),
    per_epoch("type3_official", _unstepped_one_cycle(_type3),
              "type3 as the official PatchTST and PDF code trains: the first epoch at lr/25 and Adam's beta1 0.95 "
              "(its OneCycleLR, built and never stepped)", beta1=lambda s, h: ONE_CYCLE_MAX_MOMENTUM),
    per_epoch("type3_08", _type3_08,
              "1, 1, 1, 1, 0.8, 0.64, ... per epoch (type3 of SparseTSF's and SegRNN's official code)"),
    per_epoch("type3_08_official", _unstepped_one_cycle(_type3_08),
              "type3_08 as the official SegRNN/SparseTSF/CycleNet code trains: the first epoch at lr/25 and "
              "Adam's beta1 0.95 (its OneCycleLR, built and never stepped)", beta1=lambda s, h: ONE_CYCLE_MAX_MOMENTUM),
    per_epoch("cosine", lambda e, h: 0.5 * (1 + math.cos(math.pi * e / h.train_epochs)), "cosine per epoch"),
    per_epoch("constant", lambda e, h: 1.0, "the scaled lr throughout"),
    Schedule("TST", one_cycle, "OneCycle per step (TSLib PatchTST/TimeMixer), peak after --pct_start of the steps; "
             "Adam's beta1 cycles 0.95-0.85-0.95 with it", flags=("pct_start",), beta1=one_cycle_beta1,
             revision=2),  # 2: with beta1 cycled (runs of revision 1 kept Adam's 0.9)
]
