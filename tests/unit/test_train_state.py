"""What training keeps: early stopping, checkpoints (trainable state, atomic writes, failed writes), the optimizer."""
import pytest
import torch
from torch import nn

from data_provider.windows import WindowDataset, direct_offsets
from tests.unit.test_readers import _args
from utils import checkpoint
from utils.early_stopping import EarlyStopping
from utils.errors import ConfigError


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


def _toy_experiment(tmp_path, model: nn.Module):
    from data_provider.factory import DataBundle
    from exp.experiment import Experiment
    from exp.identity import RunIdentity, RunPlan
    from utils.dist import DistEnv

    data = torch.randn(60, 1)
    ds = WindowDataset(data, None, 0, 60, 4, direct_offsets(4, 2))
    bundle = DataBundle("toy", {"train": ds, "val": ds, "test": ds}, 1, 0, ["a"], None, "toy.csv", "0-0")
    env = DistEnv(0, 0, 1, torch.device("cpu"), "gloo", False)
    plan = RunPlan(RunIdentity("toy", "0", 0, {}), str(tmp_path), str(tmp_path), "tp24", True, None, False, "")
    return Experiment(_args(results_dir=str(tmp_path)), env, bundle, model, plan)


def test_optimizer_skips_frozen_parameters(tmp_path):
    class Frozen(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone, self.head = nn.Linear(4, 4), nn.Linear(4, 2)
            self.backbone.requires_grad_(False)

    exp = _toy_experiment(tmp_path, Frozen())
    params = exp.trainer.state.optimizer.param_groups[0]["params"]
    assert len(params) == 2 and all(p.requires_grad for p in params)


def test_a_single_process_times_no_forward(tmp_path):
    """The forward timer names stragglers among ranks (tests/system/test_ddp.py); one process has none, and on a GPU
    the timer's two CUDA events a step would be host time an overhead-bound step waits on."""
    from utils.timing import NoTimer

    exp = _toy_experiment(tmp_path, nn.Linear(4, 2))
    assert isinstance(exp.trainer.forward_timer, NoTimer) and exp.trainer.forward_timer.total() == 0.0


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
