"""Sharded model states (PyTorch FSDP2, --fsdp) and activation checkpointing, both per block of a model.

Under --fsdp every block, then the model itself, keeps 1/world of its parameters, gradients and optimizer state
on each rank; a block's parameters are gathered for its forward and its backward only. Checkpoints stay one
file in the format every other run writes: the full state is gathered for the main rank, which writes it as
before. So a model trained sharded is tested or fine-tuned by an unsharded run, and the other way around (a run
resumes in its own mode: --fsdp is part of its identity); torch.distributed.checkpoint (a file per rank) would
only pay once a model's full state outgrows one host's memory, far beyond the models here.
"""
import contextlib
import functools
import warnings

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def blocks(model: nn.Module, run_forward) -> list:
    """The repeated layers of a model: the elements of its outermost nn.ModuleLists that the model calls in a
    forward (run_forward: one such forward) and that hold parameters; a block's own ModuleLists are part of it.
    A layer whose weights the model reads without calling it (a list of heads used as tensors) stays with the
    model: FSDP gathers a block's parameters only when the block is called."""
    candidates, inside = [], set()
    for module in model.modules():  # parents before their children
        if isinstance(module, nn.ModuleList) and module not in inside:
            candidates += [block for block in module if any(True for _ in block.parameters())]
            inside.update(m for block in module for m in block.modules())
    called = set()
    hooks = [block.register_forward_pre_hook(lambda block, _: called.add(block)) for block in candidates]
    try:
        run_forward()
    finally:
        for hook in hooks:
            hook.remove()
    return [block for block in candidates if block in called]


def checkpoint_activations(model_blocks: list) -> None:
    """Each block keeps only its inputs in the forward and runs again in the backward. The random state is
    restored for the second run (dropout draws the same masks), so the numbers are those of a plain run."""
    for block in model_blocks:
        block.forward = functools.partial(checkpoint, block.forward, use_reentrant=False)


def shard(model: nn.Module, model_blocks: list, param_dtype: torch.dtype | None, cpu_offload: bool) -> None:
    """FSDP2 in place: each block, then the root (whatever no block holds: embeddings, heads).

    param_dtype: with --use_amp, parameters are gathered and used in it (half the bytes gathered); gradients
    are reduced in float32, and the sharded parameters the optimizer updates stay float32.
    cpu_offload: the shards, their gradients and the optimizer step live in host memory (CUDA runs)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    # FSDP warns when the root returns a view: writing into it in place would skip its backward hook. The
    # training loop never writes into a forecast.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    policies = {}
    if param_dtype is not None:
        policies["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    if cpu_offload:
        policies["offload_policy"] = CPUOffloadPolicy()
    for block in model_blocks:
        fully_shard(block, **policies)
    fully_shard(model, **policies)


@contextlib.contextmanager
def no_gradient_sync(model: nn.Module):
    """Gradient accumulation: micro-batches before the last of a step keep unsharded gradients, not reduced."""
    model.set_requires_gradient_sync(False)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """(model state, optimizer state) of the whole model on the main rank, on the CPU, as an unsharded run's
    state_dict() gives them ({} on the other ranks). A collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    model_state, optimizer_state = get_state_dict(
        model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return model_state, _by_index(optimizer_state) if optimizer_state else {}


def load_model_state(model: nn.Module, state: dict) -> None:
    """A full model state (checked against the model already) into its shards. Every rank holds `state` and cuts its
    own shards from it, without communication. torch's set_model_state_dict would refuse the model under
    --cpu_offload: its shards are in host memory and its buffers, which are not sharded, on the GPU ("Multiple devices
    found")."""
    from torch.distributed.tensor import DTensor, distribute_tensor
    own, local = model.state_dict(), {}
    for key, value in state.items():
        mine = own[key]
        if isinstance(mine, DTensor) and value.dim() > 0:
            local[key] = distribute_tensor(value.detach(), mine.device_mesh, mine.placements, src_data_rank=None)
        else:
            local[key] = value
    model.load_state_dict(local, strict=False)


def load_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """A full optimizer state as optimizer.state_dict() gives it (parameters numbered in the optimizer's order)
    into the shards of every rank."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
    names = {param: name for name, param in model.named_parameters()}
    order = [names[param] for group in optimizer.param_groups for param in group["params"]]
    set_optimizer_state_dict(model, optimizer, _renumbered(state, dict(enumerate(order))),
                             options=StateDictOptions(full_state_dict=True))


def _by_index(state: dict) -> dict:
    """An optimizer state keyed by parameter names (torch.distributed.checkpoint's form) numbered as
    optimizer.state_dict() numbers them: in the order of the groups' parameters."""
    order = (name for group in state["param_groups"] for name in group["params"])
    return _renumbered(state, {name: i for i, name in enumerate(order)})


def _renumbered(state: dict, key: dict) -> dict:
    """An optimizer state with each parameter's key (index or name) replaced by key[it]."""
    return {"state": {key[k]: s for k, s in state["state"].items()},
            "param_groups": [{**group, "params": [key[k] for k in group["params"]]} for group in state["param_groups"]]}


def state_mb(model: nn.Module, optimizer: torch.optim.Optimizer, device_type: str | None = None) -> float:
    """MB of parameters and optimizer state this rank holds: its shards under FSDP, its share of the optimizer
    state under --zero, everything otherwise; with device_type, only what is on devices of that type (what
    --cpu_offload leaves on the GPU)."""
    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if hasattr(t, "to_local") else t  # a DTensor's own shard
    own = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer steps a local optimizer
    tensors = [local(p) for p in model.parameters()]
    tensors += [local(v) for s in own.state.values() for v in s.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors
               if device_type is None or t.device.type == device_type) / 2 ** 20
