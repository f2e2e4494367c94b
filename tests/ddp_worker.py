"""Entry for tests: run.cli(argv) with test probes as Exp callbacks, then dump what it returned.

    torchrun --nproc_per_node=2 tests/ddp_worker.py OUT_DIR --ddp <run.py flags>
    python tests/ddp_worker.py OUT_DIR <run.py flags>          # one process
    tests.conftest.forked_ranks(...)                           # ranks forked from the test process

Test-only probes, switched on by environment variables (epochs and steps count from 1):
    COUNT_ALLREDUCE=1           count DDP's gradient all-reduces (a comm hook around the default one)
    SLOW_RANK=r                 rank r sleeps 20 ms per training step (a straggler)
    STALL_RANK=r                rank r stops forever at its first training step (a hung peer)
    RAISE_RANK=r                rank r raises at its third training step
    NAN_AT=r:epoch:step         rank r's loss is infinite at that step
    PAUSE_AT=r:epoch:step:file  on the first attempt only, rank r writes its pid to file and waits to be killed
    STOP_AT=epoch:step          every rank raises at that step (a job that dies, to be resumed)
    MASKS_TO=file               each rank writes the dropout mask of its first training step to file.<rank>.pt
"""
import json
import os
import sys
import time

import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

import run

RANK = os.environ.get("RANK", "0")
ALLREDUCES = []


def _count_allreduces():
    original_init = DistributedDataParallel.__init__

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        self.register_comm_hook(None, lambda state, bucket: ALLREDUCES.append(1) or allreduce_hook(state, bucket))

    DistributedDataParallel.__init__ = init


class Probes:
    """Exp callback: the probes switched on in the environment, at every training step of this rank."""

    def on_train_step(self, epoch: int, step: int, loss: torch.Tensor) -> torch.Tensor:
        env = os.environ

        def at(spec: str) -> bool:
            rank, at_epoch, at_step = spec.split(":")[:3]
            return rank == RANK and (epoch, step) == (int(at_epoch), int(at_step))

        if env.get("SLOW_RANK") == RANK:
            time.sleep(0.02)
        if env.get("STALL_RANK") == RANK:
            time.sleep(3600)
        if env.get("RAISE_RANK") == RANK and step == 3:
            raise RuntimeError(f"injected failure on rank {RANK}")
        if env.get("STOP_AT") and (epoch, step) == tuple(map(int, env["STOP_AT"].split(":"))):
            raise RuntimeError(f"stopped at epoch {epoch}, step {step}")
        if env.get("NAN_AT") and at(env["NAN_AT"]):
            return loss * float("inf")
        if env.get("PAUSE_AT") and at(env["PAUSE_AT"]) and env.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
            with open(env["PAUSE_AT"].split(":", 3)[3], "w") as f:
                f.write(str(os.getpid()))
            time.sleep(3600)
        return loss


def _record_first_dropout_mask(path: str):
    """The first CPU dropout mask this rank draws in training (models.layers.dropout.keep_mask)."""
    from models.layers import dropout
    original = dropout.keep_mask

    def keep_mask(x, drop_level):
        mask = original(x, drop_level)
        if not os.path.exists(path):
            torch.save(mask.clone(), path)
        return mask

    dropout.keep_mask = keep_mask


def main(out_dir: str, argv: list) -> None:
    global RANK
    RANK = os.environ.get("RANK", "0")  # set again: forked ranks import this module before they have one
    if os.environ.get("COUNT_ALLREDUCE"):
        _count_allreduces()
    if os.environ.get("MASKS_TO"):
        _record_first_dropout_mask(f"{os.environ['MASKS_TO']}.{RANK}.pt")
    results = run.cli(argv, callbacks=[Probes()])
    for r in results:
        r.update(allreduces=len(ALLREDUCES), rank=int(RANK),
                 restarts=int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")))
    with open(os.path.join(out_dir, f"rank{RANK}.json"), "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
    run._exit(0)
