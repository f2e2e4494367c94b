"""Sharded model states (--fsdp) and activation checkpointing: FSDP trains like DDP, its checkpoints are those
of any other run, a sharded run resumes exactly, and recomputing activations changes no number."""
import pytest
import torch
from torch import nn

import models
import run
from exp.config import parse_args, resolve
from exp.flags import model_hparams
from exp.parallel import model_blocks
from utils import fsdp


class _Heads(nn.Module):
    """A block list the model calls (layers, with a list inside each) and one whose weights it reads directly."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.ModuleList([nn.Linear(4, 4)])[0])
                                    for _ in range(2))
        self.heads = nn.ModuleList(nn.Linear(4, 1) for _ in range(3))
        self.unused = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        self.no_parameters = nn.ModuleList([nn.ReLU()])

    def forward(self, x):
        for layer in self.layers:
            x = self.no_parameters[0](layer(x))
        return x @ torch.cat([h.weight for h in self.heads]).T


def test_blocks_are_the_called_layers_of_the_outermost_module_lists(tiny_csv, tiny_args):
    toy = _Heads()
    assert fsdp.blocks(toy, lambda: toy(torch.zeros(1, 4))) == list(toy.layers)
    args = resolve(parse_args(tiny_args + ["--e_layers", "3"]))
    data = run.build_data(args, torch.device("cpu"), True, False)
    model = models.build(args.model, {**args.as_dict(), "enc_in": data.n_channels, "n_marks": data.n_marks},
                         model_hparams(args))
    blocks = model_blocks(model, args, data.first_window())
    assert len(blocks) == 3 and all(any(b is m for m in model.modules()) for b in blocks)


@pytest.fixture
def one_rank_group(tmp_path):
    """A process group of this process alone (fully_shard needs one)."""
    import torch.distributed as dist
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_shard_puts_each_block_and_the_root_under_fsdp_gathering_in_bf16(one_rank_group):
    from torch.distributed.fsdp import FSDPModule
    toy = _Heads()
    blocks = fsdp.blocks(toy, lambda: toy(torch.zeros(1, 4)))
    fsdp.shard(toy, blocks, torch.bfloat16, cpu_offload=False)
    assert all(isinstance(m, FSDPModule) for m in [toy, *blocks])
    assert not any(isinstance(m, FSDPModule) for m in toy.heads)  # read as tensors: the root's
    seen = []
    # inside a block's forward: its parameters gathered in bf16, its input cast to bf16
    blocks[0][0].register_forward_pre_hook(lambda linear, inputs: seen.append((linear.weight.dtype, inputs[0].dtype)))
    out = toy(torch.zeros(2, 4))
    assert seen == [(torch.bfloat16, torch.bfloat16)] and out.dtype == torch.bfloat16
    toy.reshard()  # the root keeps its parameters gathered after forward, for the backward that usually follows
    assert all(p.dtype == torch.float32 for p in toy.parameters())  # the shards the optimizer updates


def test_a_full_state_loads_into_the_shards_and_the_unsharded_buffers(one_rank_group):
    """Each rank cuts its shards from the full state itself (torch's set_model_state_dict refused a model whose
    offloaded shards and GPU buffers sit on two devices); BatchNorm's running statistics load as they are."""
    from torch.distributed.tensor import DTensor
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    source = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    source(torch.randn(16, 4) * 3 + 1)  # running statistics off their initial values
    fsdp.shard(model, [model[0], model[2]], None, cpu_offload=False)
    fsdp.load_model_state(model, source.state_dict())
    loaded = {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in model.state_dict().items()}
    assert isinstance(model.state_dict()["0.weight"], DTensor)
    assert loaded.keys() == source.state_dict().keys()
    assert all(torch.equal(loaded[k], v) for k, v in source.state_dict().items())


def test_state_mb_counts_parameters_and_optimizer_state_and_only_a_device_types_when_asked():
    model = nn.Linear(256, 256)  # 65,792 float32 parameters
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 256)).sum().backward()
    optimizer.step()  # two moments per parameter (and a step count per tensor)
    params_mb = 65_792 * 4 / 2 ** 20
    assert fsdp.state_mb(model, optimizer) == pytest.approx(3 * params_mb, rel=1e-3)
    assert fsdp.state_mb(model, optimizer, "cpu") == fsdp.state_mb(model, optimizer)
    assert fsdp.state_mb(model, optimizer, "cuda") == 0, "what --cpu_offload leaves on the GPU: here, nothing"


@pytest.mark.parametrize("device, fsdp_run, chosen, expected", [
    ("cuda", False, None, torch.float16), ("cpu", False, None, torch.bfloat16), ("cuda", True, None, torch.bfloat16),
    ("cuda", False, "bf16", torch.bfloat16), ("cpu", False, "fp16", torch.float16),
    ("cuda", True, "bf16", torch.bfloat16)])
def test_amp_dtype_is_the_chosen_one_else_the_devices_default(device, fsdp_run, chosen, expected):
    from types import SimpleNamespace

    from exp.parallel import amp_dtype
    assert amp_dtype(SimpleNamespace(amp_dtype=chosen, fsdp=fsdp_run), torch.device(device)) == expected
