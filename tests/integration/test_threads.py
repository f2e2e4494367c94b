"""The intra-op thread count a run chooses: the flag, then OMP_NUM_THREADS, then the cores this process may use,
shared among the node's ranks and left free by other processes; the cgroup quota; the load probe."""
import os

import pytest
import torch

import run
from utils import threads


class _Stop(Exception):
    pass


class _StopInEpoch2:
    def on_train_step(self, epoch, step, loss):
        if epoch == 2:
            raise _Stop
        return loss


def test_a_run_logs_its_threads_and_a_resumed_one_takes_those_it_was_trained_with(tiny_args, capsys, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    flags = tiny_args + ["--model", "dlinear", "--nonautoregressive", "--resume", "auto"]
    with pytest.raises(_Stop):
        run.main(flags + ["--threads", "1"], callbacks=[_StopInEpoch2()])
    assert "intra-op threads: 1 (--threads)" in capsys.readouterr().err
    (last,) = [os.path.join(d, "last.pth") for d, _, f in os.walk(flags[flags.index("--checkpoints") + 1])
               if "last.pth" in f]
    assert torch.load(last, weights_only=True)["threads"] == 1
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.setattr(threads.LoadProbe, "others_busy", lambda self: 0.0)
    resumed = run.main(flags)[0]
    err = capsys.readouterr().err
    assert "intra-op threads: 2 (2 cores available, 1 rank(s) on this node, 0.0 kept busy" in err
    assert "intra-op threads: 1, as the run was trained with (the rule gave 2)" in err
    assert [h["epoch"] for h in resumed["history"]] == [1, 2] and torch.get_num_threads() == 1
