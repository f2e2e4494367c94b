import functools
import os
import zipfile
from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, Published, d_model, e_layers, hparam, n_heads
from models.layers.outputs import per_series
from models.layers.published import context_length_hparam, levels, package, quantile_levels_hparam, quantile_outputs

DISTRIBUTION = "tirex-ts"
CHECKPOINT = "model.ckpt"  # what `huggingface-cli download NX-AI/TiRex` gives: a Lightning checkpoint
FFN_PROJ_FACTOR = 2.6667  # the publisher's sLSTMBlockConfig default, where block_kwargs leave it out
WHAT = (f"a TiRex checkpoint ({CHECKPOINT}, or a folder holding it: hyper_parameters with model_config and "
        "train_ctx_len, and a state_dict)")


class Model(nn.Module):
    """TiRex: a stack of xLSTM blocks (sLSTM sequence mixing and a gated feed-forward) over patches of a series and
    their missing-value masks, scaled by the series' own mean and standard deviation, forecasting the quantiles of
    the next patch from the last one.

    Auer et al. "TiRex: Zero-Shot Forecasting Across Long and Short Horizons with Enhanced In-Context Learning."
    arXiv 2025, https://arxiv.org/abs/2505.23719; code: https://github.com/NX-AI/tirex (the package tirex-ts,
    tirex/models/tirex.py).

    The network is the publisher's own (TiRexZero of tirex-ts), built from these hyper-parameters; --pretrained
    loads a published checkpoint (NX-AI/TiRex: the folder `huggingface-cli download` gives, or its model.ckpt) into
    it. The forecast is TiRexZero.forecast's (its _forecast_tensor, with the default of one patch per forward), its
    arithmetic redone here with its modules because the API runs under inference_mode: each channel on its own; the
    context cut to its last context_length points or padded in front to them with missing (NaN) points; scaled by
    the mean and standard deviation of its observed points; cut into patches of patch_len, each with its mask of
    observed points; the quantiles of the next patch_len points read from the last patch. Beyond them the context is
    extended by a patch of missing points (masked, not a forecast fed back) and the window of context_length points
    that ends there forecast again, its scale that window's, until output_token_len points are forecast. A point loss
    gets the median (the API's point forecast, its `mean`); --loss quantile gets every level (its --quantiles must be
    quantile_levels). Missing values in a window (NaN) are masked as the publisher's are.

    Device: the sLSTM cells use the publisher's pure-torch backend ("torch", load_model's default) on every device:
    the forecast runs where the input and the parameters are (CPU or GPU) and is differentiable. The CUDA kernels of
    the package's other backend (xlstm) are not used. The torch backend runs the recurrence in bfloat16, as the
    publisher's does, outside any autocast (--use_amp), which would otherwise mix float16 into it; its recurrent
    product is taken per head (slstm_recurrence), which keeps training's memory to that of the states.

    Deviations: the output head is applied to the last patch alone (the publisher applies it to every patch and keeps
    the last: the same values); TiRexZero leaves its sLSTM weights uninitialised (torch.empty) for a checkpoint to
    fill, so a network trained from scratch takes xLSTM's initialisation (headwise gate projections N(0, 2 / 5 /
    head_dim), recurrent kernel 0, forget-gate bias the block-dependent power law, other biases 0).

    Defaults are NX-AI/TiRex's configuration (35.3M parameters).
    """
    capabilities = Capabilities(direct=True, covariate=False, multi_output=True)
    head_modules = ("tirex.output_patch_embedding",)
    revision = 2  # 2: the recurrent kernel's gradient summed per head (slstm_recurrence): fine-tuning rounds otherwise

    @dataclass
    class Config:
        d_model: int = d_model(512)
        n_heads: int = n_heads(4)
        e_layers: int = e_layers(12)
        input_ff_dim: int = hparam(2048, "hidden width of the residual blocks that embed the input patches and read "
                                         "out the output patches (TiRex's input_ff_dim)", tiny=16, low=1)
        ffn_proj_factor: float = hparam(FFN_PROJ_FACTOR, "width of each xLSTM block's feed-forward as a multiple of "
                                                         "d_model, rounded up to a multiple of 64", low=0.1)
        patch_len: int = hparam(32, "points per input patch, and per output patch: one forward's forecast; longer "
                                    "forecasts go on with masked patches", tiny=4, low=1)
        context_length: int = context_length_hparam(2048, tiny=16)
        quantile_levels: str = quantile_levels_hparam()

    def __init__(self, configs):
        super().__init__()
        tirex = package("tirex.models.tirex", DISTRIBUTION)
        quantiles, self.median = quantile_outputs(configs)
        if configs.d_model % configs.n_heads:
            raise ValueError(f"d_model {configs.d_model} must be a multiple of n_heads {configs.n_heads}")
        if configs.context_length % configs.patch_len:
            raise ValueError(f"context_length {configs.context_length} must be a multiple of patch_len "
                             f"{configs.patch_len}")
        self.out_len, self.n_outputs = configs.output_token_len, configs.n_outputs
        self.context_length, self.patch_len = configs.context_length, configs.patch_len
        self.n_quantiles = len(quantiles)
        self.hparams = {name: getattr(configs, name) for name in self.Config.__dataclass_fields__}
        self.tirex = tirex.TiRexZero(backend="torch", **architecture(configs))
        pointwise = package("tirex.models.slstm.cell", DISTRIBUTION).sLSTMCellTorch.slstm_forward_pointwise
        for block in self.tirex.blocks:
            cell = block.slstm_layer.slstm_cell
            cell.__class__ = outside_autocast(type(cell))  # its state_dict keys and the publisher's code unchanged
            cell._impl_forward_torch = functools.partial(slstm_recurrence, pointwise=pointwise)
        self._init_slstm()

    def _init_slstm(self) -> None:
        """xLSTM's initialisation of what TiRexZero leaves uninitialised (torch.empty) for a checkpoint to fill."""
        blocks = self.tirex.blocks
        with torch.no_grad():
            for index, block in enumerate(blocks):
                layer = block.slstm_layer
                for gate in (layer.fgate, layer.igate, layer.zgate, layer.ogate):
                    nn.init.normal_(gate.weight, mean=0.0, std=(2 / 5 / gate.weight.shape[-1]) ** 0.5)
                cell = layer.slstm_cell
                nn.init.zeros_(cell._recurrent_kernel_)
                heads, head_dim = cell.config.num_heads, cell.config.head_dim
                bias = torch.zeros(heads, cell.config.num_gates, head_dim)  # (heads, gates i f z o, head_dim)
                ratio = index / (len(blocks) - 1) if len(blocks) > 1 else 0.0
                ramp = torch.arange(head_dim) / max(head_dim - 1, 1)
                bias[:, 1] = -(-5.0 + 12.0 * ramp ** (0.3 + 1.3 * ratio))  # the forget gate's power law
                cell._bias_.copy_(bias.reshape(-1))

    @staticmethod
    def published(path: str) -> Published:
        found = read_checkpoint(path, mmap=True)["hyper_parameters"]
        config, blocks = found["model_config"], found["model_config"]["block_kwargs"]
        hparams = {"d_model": blocks["embedding_dim"], "n_heads": blocks["num_heads"],
                   "e_layers": blocks["num_blocks"], "input_ff_dim": config["input_ff_dim"],
                   "ffn_proj_factor": blocks.get("ffn_proj_factor", FFN_PROJ_FACTOR),
                   "patch_len": config["input_patch_size"], "context_length": found["train_ctx_len"],
                   "quantile_levels": ",".join(str(float(q)) for q in config["quantiles"])}
        return Published(hparams, max_seq_len=found["train_ctx_len"])

    def load_published(self, path: str) -> None:
        found, mine = self.published(path).hparams, dict(self.hparams)
        mine["quantile_levels"] = ",".join(str(q) for q in levels(mine["quantile_levels"]))
        differ = {k: (v, mine[k]) for k, v in found.items() if v != mine[k]}
        if differ:
            raise ValueError("the checkpoint's architecture is not this model's: "
                             + ", ".join(f"{k} {v} (here {here})" for k, (v, here) in differ.items()))
        checkpoint = read_checkpoint(path)
        self.tirex.on_load_checkpoint(checkpoint)  # the publisher's renaming of its keys (block_stack.)
        self.tirex.load_state_dict(checkpoint["state_dict"], strict=True)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        return per_series(self._values, x, self.n_outputs)

    def _values(self, context: torch.Tensor) -> torch.Tensor:
        """(series, output_token_len, k) in the input's dtype: every quantile, or the median alone."""
        quantiles = self.forecast(context).transpose(1, 2).to(context.dtype)
        return quantiles if self.n_outputs > 1 else quantiles[..., self.median:self.median + 1]

    def forecast(self, context: torch.Tensor) -> torch.Tensor:
        """TiRexZero._forecast_tensor on a batch of contexts (series, time): quantiles (series, Q, output_token_len)."""
        tirex, L = self.tirex, self.context_length
        context = context.float()
        predictions = []
        for _ in range(-(-self.out_len // self.patch_len)):
            window = context[:, -L:]
            if window.shape[1] < L:
                window = torch.cat([window.new_full((window.shape[0], L - window.shape[1]), float("nan")), window], 1)
            tokens, scaling = tirex.tokenizer.input_transform(window)  # (series, patches, patch_len), scaled
            observed = tokens.isnan().logical_not().to(tokens.dtype)
            hidden = tirex.input_patch_embedding(torch.cat([tokens.nan_to_num(tirex.config.nan_mask_value),
                                                            observed], dim=2))
            for block in tirex.blocks:
                hidden = block(hidden)
            last = tirex.output_patch_embedding(tirex.out_norm(hidden[:, -1:]))  # (series, 1, Q * patch_len)
            last = last.unflatten(-1, (self.n_quantiles, self.patch_len)).transpose(1, 2)  # (series, Q, 1, patch_len)
            predictions.append(tirex.tokenizer.output_transform(last.to(tokens), scaling))  # (series, Q, patch_len)
            context = torch.cat([context, context.new_full((context.shape[0], self.patch_len), float("nan"))], 1)
        return torch.cat(predictions, dim=-1)[..., :self.out_len]


@functools.cache
def outside_autocast(cell_class: type) -> type:
    """The publisher's sLSTM cell sets its own precision (the recurrence in bfloat16, the gates in float32). Under fp16
    autocast its matmuls would turn float16 and meet its bfloat16 states in one torch.stack, which autocast refuses
    (--use_amp on CUDA); under bf16 autocast and without it, running it outside autocast changes nothing."""
    class OutsideAutocast(cell_class):
        def forward(self, input: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            with torch.autocast(input.device.type, enabled=False):
                return super().forward(input, state)

    OutsideAutocast.__name__ = OutsideAutocast.__qualname__ = cell_class.__name__
    return OutsideAutocast


def slstm_recurrence(x: torch.Tensor, states: torch.Tensor, R: torch.Tensor, b: torch.Tensor,
                     pointwise) -> tuple[torch.Tensor, torch.Tensor]:
    """sLSTMCellTorch.slstm_forward (inputs x (steps, series, 4 H), states (4, series, H), recurrent kernel R (heads,
    head_dim, 4 head_dim), bias b) with the same arithmetic, its recurrent product taken per head as one (heads,
    series, head_dim) @ R. The publisher's broadcast product, (series, heads, 1, head_dim) @ R[None], copies R for
    every series at every step, and autograd keeps each copy: at batch 32 (224 series) and d_model 512 that is 112
    MiB a step, 64 steps of 12 blocks a patch, and a training step ran an H200's 140 GB out."""
    heads, head_dim = R.shape[0], R.shape[1]
    series = x.shape[1]
    states = states.to(R.dtype).unbind(dim=0)
    output = []
    for step in x:
        Ry = torch.bmm(states[0].reshape(series, heads, head_dim).transpose(0, 1), R)  # (heads, series, 4 head_dim)
        Ry = Ry.view(heads, series, 4, head_dim).permute(1, 2, 0, 3).reshape(series, -1)  # the publisher's order
        states = pointwise(step.float(), Ry.float(), b.float(), [s.float() for s in states])
        states = [s.to(dtype=R.dtype) for s in states]
        output.append(states[0])
    return torch.stack(output), torch.stack(states)


def architecture(configs) -> dict:
    """TiRexZero's arguments for these hyper-parameters (what a checkpoint's hyper_parameters hold)."""
    return {"model_config": {"input_patch_size": configs.patch_len, "output_patch_size": configs.patch_len,
                             "quantiles": list(levels(configs.quantile_levels)),
                             "block_kwargs": {"embedding_dim": configs.d_model, "num_heads": configs.n_heads,
                                              "num_blocks": configs.e_layers,
                                              "ffn_proj_factor": configs.ffn_proj_factor},
                             "input_ff_dim": configs.input_ff_dim},
            "train_ctx_len": configs.context_length}


def read_checkpoint(path: str, mmap: bool = False) -> dict:
    """The TiRex checkpoint at `path` (its model.ckpt, or that file itself), loaded on the CPU as the publisher's
    from_pretrained loads it (weights_only); ValueError naming what it found where it is not one. mmap: map the
    tensors rather than read them (only the configuration is wanted)."""
    file = os.path.join(path, CHECKPOINT) if os.path.isdir(path) else path
    if not os.path.isfile(file):
        found = (f"a folder of {', '.join(sorted(os.listdir(path))[:5]) or 'nothing'}" if os.path.isdir(path)
                 else "nothing")
        raise ValueError(f"expected {WHAT}, found {found}")
    try:
        checkpoint = torch.load(file, map_location="cpu", weights_only=True, mmap=mmap and zipfile.is_zipfile(file))
    except Exception as e:  # noqa: BLE001 - whatever torch.load fails on, the file is not a checkpoint it reads
        raise ValueError(f"expected {WHAT}, found a file torch.load cannot read ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''})") from None
    if not isinstance(checkpoint, dict) or not {"hyper_parameters", "state_dict"} <= checkpoint.keys():
        keys = sorted(checkpoint)[:8] if isinstance(checkpoint, dict) else type(checkpoint).__name__
        raise ValueError(f"expected {WHAT}, found a checkpoint of {keys}")
    found = checkpoint["hyper_parameters"]
    config = found.get("model_config") if isinstance(found, dict) else None
    needed = {"input_patch_size", "output_patch_size", "quantiles", "block_kwargs", "input_ff_dim"}
    if not isinstance(config, dict) or "train_ctx_len" not in found or not needed <= config.keys() \
            or not isinstance(config["block_kwargs"], dict) \
            or not {"embedding_dim", "num_heads", "num_blocks"} <= config["block_kwargs"].keys():
        raise ValueError(f"expected {WHAT} (model_config of {', '.join(sorted(needed))}, block_kwargs of "
                         f"embedding_dim, num_heads, num_blocks), found hyper_parameters {found}")
    if config["input_patch_size"] != config["output_patch_size"]:
        raise ValueError(f"expected input and output patches of one size, as TiRexZero has; found "
                         f"{config['input_patch_size']} and {config['output_patch_size']}")
    for key in ("num_gates", "num_states"):
        if config["block_kwargs"].get(key, 4) != 4:
            raise ValueError(f"expected sLSTM cells of 4 {key[4:]}, as TiRexZero's torch backend has; found "
                             f"{config['block_kwargs'][key]}")
    return checkpoint
