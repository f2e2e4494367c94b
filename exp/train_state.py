"""Everything a resumed run needs, one part per stateful piece: the model's weights, the optimizer, the lr
schedule (its step is also the position in the training order, which the loader recomputes), the AMP scaler,
early stopping, the history, every rank's random streams and the step losses of a row saved in its middle.

A checkpoint is the dict of their state dicts (plus the run's identity and flags, which the Trainer adds);
resuming is load_state_dict of it. Under DDP the ranks' random states are gathered, under FSDP the model and
optimizer states are gathered in the unsharded format, under ZeRO the optimizer state is consolidated: saving
is a collective, and every rank calls state_dict(); the main rank writes.
"""
import logging

import torch

from exp.parallel import RunningModel
from utils import checkpoint, fsdp, threads
from utils.dist import DistEnv, all_gather_object
from utils.early_stopping import EarlyStopping
from utils.log import GROUP
from utils.seeding import rank_seed, rng_state, seed_everything, set_rng_state

log = logging.getLogger(__name__)
group_log = logging.getLogger(GROUP)


class TrainState:
    def __init__(self, running: RunningModel, optimizer, scheduler, scaler, stopper: EarlyStopping, env: DistEnv,
                 seed: int, optimizer_sharded: bool):
        self.running, self.optimizer, self.scheduler, self.scaler, self.stopper = \
            running, optimizer, scheduler, scaler, stopper
        self.env, self.seed, self.optimizer_sharded = env, seed, optimizer_sharded
        self.history = []  # one row per validation, kept on every rank

    @property
    def step(self) -> int:
        return self.scheduler.steps

    def state_dict(self, row_so_far: list | None = None) -> dict:
        """Every rank calls it (a collective); only the main rank's is complete enough to write (the others'
        weights are read lazily: see lazy). row_so_far: inside a row, every rank's step losses since its start."""
        if self.optimizer_sharded:
            self.optimizer.consolidate_state_dict(to=0)  # ZeRO: rank 0 gets the whole state
        rng = all_gather_object(rng_state(self.env.device))  # every rank's stream, for an exact resume
        model_state, optimizer_state = fsdp.full_state(self.running.model, self.optimizer) \
            if self.running.sharded else (None, None)
        return {"model": lambda: checkpoint.trainable_state(self.running.raw, model_state),
                "optimizer": lambda: self.optimizer.state_dict() if optimizer_state is None else optimizer_state,
                "scheduler": self.scheduler.state_dict(), "scaler": self.scaler.state_dict(),
                "early_stopping": self.stopper.state_dict(), "history": list(self.history),
                "epoch": len(self.history) - 1, "step": self.step, "row_so_far": row_so_far, "rng": rng,
                "world_size": self.env.world_size, "threads": torch.get_num_threads()}

    def load_state_dict(self, state: dict) -> torch.Tensor | None:
        """Continue from a checkpoint at the step it was saved at; returns this rank's step losses of the row it
        was saved inside (None: saved at a row's end). The model's weights are loaded with load_weights."""
        if self.running.sharded:
            fsdp.load_optimizer_state(self.running.model, self.optimizer, state["optimizer"])
        else:
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.stopper.load_state_dict(state["early_stopping"])
        self.history[:] = state["history"]
        self._restore_rng(state["rng"], state["epoch"])
        if "threads" in state:  # absent from checkpoints written before thread counts were chosen
            threads.resume_with(state["threads"])
        inside = state.get("row_so_far")  # absent from checkpoints written before runs by steps
        if inside is None:
            return None
        rank = self.env.rank
        return inside[rank] if rank < len(inside) else torch.zeros(0, inside[0].shape[1])

    def _restore_rng(self, saved: list, epoch: int) -> None:
        """Each rank continues its own random stream, so a resumed run equals an uninterrupted one. A group of
        another size cannot: ranks beyond the saved ones start fresh streams (seeded by seed, rank and epoch),
        and the continuation is equal in distribution only."""
        rank, world = self.env.rank, self.env.world_size
        if rank < len(saved):
            set_rng_state(saved[rank], self.env.device)
        else:
            seed_everything(rank_seed(self.seed, rank, epoch))
        if len(saved) != world:
            group_log.warning("resuming a run of %d ranks with %d: the random streams of the ranks continue only "
                              "where both have them, so this continuation is not bit-identical to an "
                              "uninterrupted run", len(saved), world)


def lazy(state: dict) -> dict:
    """The payload of a state_dict, its deferred parts (the weights, the optimizer state) read now: only the
    writing rank pays for serialising them."""
    return {k: v() if callable(v) else v for k, v in state.items()}


def load_weights(running: RunningModel, path: str, device: torch.device) -> dict:
    """A checkpoint's weights into the model, returning the whole checkpoint. Sharded: mapped, on the CPU, so a rank
    reads the parts it uses and its device receives only its shards."""
    if not running.sharded:
        state = checkpoint.load(path, device)
        checkpoint.load_trainable_state(running.raw, state["model"], path)
        return state
    state = checkpoint.load(path, mmap=True)
    fsdp.load_model_state(running.model, checkpoint.matching_state(running.model, state["model"], path))
    return state
