"""Distribution detected once from the torchrun environment, plus reduction helpers.

Every helper is a no-op in a single process, so the training code has one path for
1 process, N processes on one node and N nodes.
"""
import datetime
import os
import statistics
from dataclasses import dataclass

import torch
import torch.distributed as dist

from utils.errors import ConfigError

_TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


@dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    backend: str  # nccl on CUDA, gloo on CPU; unused single-process
    ddp: bool

    @property
    def is_main(self) -> bool:
        """Global rank 0: the only process that writes files and prints progress."""
        return self.rank == 0


def detect(ddp: bool, device: str = "auto") -> DistEnv:
    """Read rank/world from torchrun's variables; refuse a launch that does not match --ddp."""
    under_torchrun = all(v in os.environ for v in _TORCHRUN_VARS)
    if ddp and not under_torchrun:
        raise ConfigError("--ddp needs a torchrun launch (RANK, LOCAL_RANK, WORLD_SIZE are not set): "
                          "torchrun --nproc_per_node=N run.py --ddp ...")
    if not ddp and under_torchrun:
        raise ConfigError("launched by torchrun but --ddp is missing: add --ddp to the run.py arguments")
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda but no CUDA device is visible")
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(f"local rank {local_rank} has no GPU: only {torch.cuda.device_count()} visible; "
                              "use --nproc_per_node <= number of GPUs")
        dev = torch.device("cuda", local_rank)
        backend = "nccl"
    elif device == "cpu":
        dev = torch.device("cpu")
        backend = "gloo"
    else:
        raise ConfigError(f"--device must be auto, cpu or cuda, got {device!r}")
    return DistEnv(rank, local_rank, world_size, dev, backend, ddp)


def init(env: DistEnv, peers, timeout_minutes: float = 30.0) -> None:
    """Join the process group through the peers' store (utils/peers.py); a bounded timeout turns a dead peer into an
    error, not a hang."""
    if not env.ddp or dist.is_initialized():
        return
    if env.device.type == "cuda":
        torch.cuda.set_device(env.device)
    timeout = datetime.timedelta(minutes=timeout_minutes)
    dist.init_process_group(backend=env.backend, store=peers.store(timeout), rank=env.rank,
                            world_size=env.world_size, timeout=timeout,
                            device_id=env.device if env.device.type == "cuda" else None)


def destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """In-place sum over all ranks (every rank receives the result); no-op single-process."""
    return _all_reduce(tensor, dist.ReduceOp.SUM)


def all_reduce_min(tensor: torch.Tensor) -> torch.Tensor:
    return _all_reduce(tensor, dist.ReduceOp.MIN)


def all_reduce_max(tensor: torch.Tensor) -> torch.Tensor:
    return _all_reduce(tensor, dist.ReduceOp.MAX)


def _all_reduce(tensor: torch.Tensor, op) -> torch.Tensor:
    if is_distributed():
        dist.all_reduce(tensor, op=op)
    return tensor


def global_mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Exact mean over all ranks from per-rank (sum, count), not a mean of per-rank means; total may hold
    several sums that share the count (one all_reduce for all)."""
    both = all_reduce_sum(torch.cat([total.double().reshape(-1), count.double().reshape(1)]))
    return (both[:-1] / both[-1]).reshape(total.shape)


def all_gather_object(obj) -> list:
    """Every rank's obj (picklable), on every rank; [obj] single-process."""
    if not is_distributed():
        return [obj]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def all_gather_floats(value: float, device: torch.device) -> list:
    """Every rank's value of a scalar, on every rank."""
    if not is_distributed():
        return [value]
    mine = torch.tensor([value], dtype=torch.float64, device=device)
    gathered = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, mine)
    return [t.item() for t in gathered]


def slow_ranks(times: list, factor: float = 1.5) -> list:
    """Ranks whose time exceeds `factor` x the median of all ranks' times."""
    median = statistics.median(times)
    return [rank for rank, t in enumerate(times) if t > factor * median]


def barrier() -> None:
    if is_distributed():
        dist.barrier()


_COLLECTIVE_FAILURES = ("gloo", "NCCL", "Timed out", "timed out", "Connection reset", "Connection closed")


def describe_failure(error: BaseException) -> str | None:
    """One line for a collective that failed because a peer died or stalled; None for other errors."""
    message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if isinstance(error, dist.DistError) or any(s in message for s in _COLLECTIVE_FAILURES):
        return (f"a collective operation failed: another rank died, stalled past --dist_timeout, or is "
                f"unreachable ({message[:300]}); check the other ranks' logs")
    return None
