"""The model as it runs: on its device, DDP-wrapped or sharded (FSDP), compiled, its blocks recomputed in the
backward; and the one window its blocks are found with."""
import contextlib
import logging
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from models.contract import one_window
from utils import fsdp
from utils.dist import DistEnv
from utils.sync_batchnorm import sync_batchnorm

log = logging.getLogger(__name__)


def model_blocks(model: nn.Module, config, first_window) -> list:
    """The blocks --fsdp shards and --activation_checkpointing recomputes one at a time (utils/fsdp.py), found by
    running the model on one window (a Batch of one, on the CPU)."""
    return fsdp.blocks(model, lambda: one_window(model, config, first_window))


@dataclass(frozen=True)
class RunningModel:
    model: nn.Module   # what a training step calls: DDP-wrapped, sharded or as built, on the device
    no_sync: object    # context for micro-batches before the last of a step (no gradient all-reduce)
    sharded: bool      # FSDP: every forward gathers parameters from every rank, so evaluations run in lockstep

    @property
    def raw(self) -> nn.Module:
        """The model without the DDP wrapper (under FSDP, the sharded model itself): what evaluation calls and
        what a checkpoint's weights are read from and loaded into."""
        return self.model.module if isinstance(self.model, DDP) else self.model


AMP_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}  # --amp_dtype


def amp_dtype(config, device: torch.device) -> torch.dtype:
    """--amp_dtype, else the device's default. fp16 needs loss scaling; bf16 (used on CPU, and for sharded states,
    whose loss scale every shard would have to agree on) keeps fp32's range and does not."""
    if config.amp_dtype is not None:
        return AMP_DTYPES[config.amp_dtype]
    return torch.float16 if device.type == "cuda" and not config.fsdp else torch.bfloat16


def distribute(model: nn.Module, config, env: DistEnv, first_window) -> RunningModel:
    c, device = config, env.device
    log.info("%s: %d parameters, %d trainable%s", c.model, sum(p.numel() for p in model.parameters()),
             sum(p.numel() for p in model.parameters() if p.requires_grad),
             f" | sharded across {env.world_size} ranks (FSDP{', gathered in bf16' if c.use_amp else ''})"
             if c.fsdp else "")
    blocks = model_blocks(model, c, first_window) if c.fsdp or c.activation_checkpointing else []
    if c.activation_checkpointing:
        fsdp.checkpoint_activations(blocks)
    if c.compile:
        model.compile()  # in place: state_dict keys and model.module stay as they are
    if c.fsdp:
        model = sync_batchnorm(model, device).to(device)
        fsdp.shard(model, blocks, amp_dtype(c, device) if c.use_amp else None, c.cpu_offload)
        return RunningModel(model, lambda: fsdp.no_gradient_sync(model), True)
    if env.ddp and env.world_size > 1:  # with one rank there is nothing to all-reduce: DDP would only cost
        # BatchNorm statistics are synchronised, so every rank's buffers are equal: no per-step broadcast
        model = DDP(sync_batchnorm(model, device).to(device),
                    device_ids=[device.index] if device.type == "cuda" else None,
                    find_unused_parameters=c.find_unused_parameters, forward_sync_buffers=False)
        return RunningModel(model, model.no_sync, False)
    return RunningModel(model.to(device), contextlib.nullcontext, False)
