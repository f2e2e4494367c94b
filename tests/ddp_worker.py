"""torchrun entry for tests: run.cli(argv) on this rank, then dump what it returned for the test to compare.

    torchrun --nproc_per_node=2 tests/ddp_worker.py OUT_DIR --ddp <run.py flags>

Test-only probes, switched on by environment variables (epochs and steps count from 1):
    COUNT_ALLREDUCE=1           count DDP's gradient all-reduces (a comm hook around the default one)
    SLOW_RANK=r                 rank r sleeps 20 ms per training step (a straggler)
    STALL_RANK=r                rank r stops forever at its first training step (a hung peer)
    RAISE_RANK=r                rank r raises at its third training step
    NAN_AT=r:epoch:step         rank r's loss is infinite at that step
    PAUSE_AT=r:epoch:step:file  on the first attempt only, rank r writes its pid to file and waits to be killed
"""
import json
import os
import sys
import time

from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

import run
from exp.exp_forecast import ExpForecast

RANK = os.environ["RANK"]
ALLREDUCES = []
POSITION = {"epoch": 0, "step": 0}


def _count_allreduces():
    original_init = DistributedDataParallel.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.register_comm_hook(None, lambda state, bucket: ALLREDUCES.append(1) or allreduce_hook(state, bucket))

    DistributedDataParallel.__init__ = init


def _at(spec: str) -> bool:
    rank, epoch, step = spec.split(":")[:3]
    return rank == RANK and POSITION["epoch"] == int(epoch) and POSITION["step"] == int(step)


def _probe(pred):
    """Runs at every training step of this rank, after the forward."""
    env = os.environ
    if env.get("SLOW_RANK") == RANK:
        time.sleep(0.02)
    if env.get("STALL_RANK") == RANK:
        time.sleep(3600)
    if env.get("RAISE_RANK") == RANK and POSITION["step"] == 3:
        raise RuntimeError(f"injected failure on rank {RANK}")
    if env.get("NAN_AT") and _at(env["NAN_AT"]):
        return pred * float("inf")
    if env.get("PAUSE_AT") and _at(env["PAUSE_AT"]) and env.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        with open(env["PAUSE_AT"].split(":", 3)[3], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(3600)
    return pred


def _install_probes():
    train_epoch, forward = ExpForecast._train_epoch, ExpForecast._forward

    def counted_epoch(self, loader, optimizer, scheduler, epoch):
        POSITION.update(epoch=epoch + 1, step=0)
        return train_epoch(self, loader, optimizer, scheduler, epoch)

    def probed_forward(self, model, batch, rollout=False):
        pred, true = forward(self, model, batch, rollout)
        if model.training:
            POSITION["step"] += 1
            pred = _probe(pred)
        return pred, true

    ExpForecast._train_epoch, ExpForecast._forward = counted_epoch, probed_forward


if __name__ == "__main__":
    out_dir, argv = sys.argv[1], sys.argv[2:]
    if os.environ.get("COUNT_ALLREDUCE"):
        _count_allreduces()
    _install_probes()
    results = run.cli(argv)
    for r in results:
        r.update(allreduces=len(ALLREDUCES), rank=int(RANK),
                 restarts=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    with open(os.path.join(out_dir, f"rank{RANK}.json"), "w") as f:
        json.dump(results, f)
