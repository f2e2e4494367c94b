"""Distribution detected once from the torchrun environment, plus reduction helpers.

Every helper is a no-op in a single process, so the training code has one path for
1 process, N processes on one node and N nodes.
"""
import datetime
import os
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


def init(env: DistEnv, timeout_minutes: float = 30.0) -> None:
    """Join the process group; a bounded timeout turns a dead peer into an error, not a hang."""
    if not env.ddp or dist.is_initialized():
        return
    if env.device.type == "cuda":
        torch.cuda.set_device(env.device)
    dist.init_process_group(backend=env.backend, rank=env.rank, world_size=env.world_size,
                            timeout=datetime.timedelta(minutes=timeout_minutes),
                            device_id=env.device if env.device.type == "cuda" else None)


def destroy() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """In-place sum over all ranks (every rank receives the result); no-op single-process."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def global_mean(total: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Exact mean over all ranks from per-rank (sum, count), not a mean of per-rank means."""
    both = all_reduce_sum(torch.stack([total.double().reshape(()), count.double().reshape(())]))
    return both[0] / both[1]


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def shard_range(n: int, rank: int, world_size: int) -> range:
    """Contiguous, disjoint shard of range(n) for one rank; sizes differ by at most one.

    Unlike DistributedSampler this never pads, so evaluation sees every window exactly once.
    """
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))
