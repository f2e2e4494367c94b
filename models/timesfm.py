import dataclasses
import json
import os
from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, Published, d_ff, d_model, e_layers, hparam, n_heads
from models.layers.outputs import per_series
from models.layers.published import (
    context_length_hparam,
    horizon_hparam,
    levels,
    package,
    quantile_levels_hparam,
    quantile_outputs,
)

DISTRIBUTION = "timesfm"
TORCH = "timesfm.timesfm_2p5.timesfm_2p5_torch"  # TimesFM_2p5_200M_torch_module, TimesFM_2p5_200M_torch
BASE = "timesfm.timesfm_2p5.timesfm_2p5_base"  # TimesFM_2p5_200M_Definition: the published architecture
UTIL = "timesfm.torch.util"  # update_running_stats, revin, DecodeCache
WEIGHTS = "model.safetensors"  # TimesFM_2p5_200M_torch.WEIGHTS_FILENAME: what `huggingface-cli download` gives
WHAT = (f"a TimesFM 2.5 checkpoint in the timesfm package's format (google/timesfm-2.5-200m-pytorch: a folder with "
        f"{WEIGHTS} holding TimesFM_2p5_200M_torch_module's tensors tokenizer.*, stacked_xf.*, "
        "output_projection_point.*, output_projection_quantiles.*)")
NEEDED = ("tokenizer.hidden_layer.weight", "tokenizer.output_layer.weight", "stacked_xf.0.ff0.weight",
          "stacked_xf.0.attn.per_dim_scale.per_dim_scale", "output_projection_point.output_layer.weight",
          "output_projection_quantiles.output_layer.weight")


class Model(nn.Module):
    """TimesFM 2.5: a decoder-only Transformer over patches of a series (each patch with its mask of padded points,
    normalised by the running mean and standard deviation of the series up to it) that forecasts, from the last
    patch, the mean and quantiles of the next `horizon` points and, with a separate head, quantiles of the next
    `quantile_horizon` points at once.

    Das, Kong, Sen, Zhou. "A decoder-only foundation model for time-series forecasting." ICML 2024,
    https://arxiv.org/abs/2310.10688; TimesFM 2.5: https://github.com/google-research/timesfm (the package timesfm,
    src/timesfm/timesfm_2p5/timesfm_2p5_torch.py).

    The network is the publisher's own (TimesFM_2p5_200M_torch_module of the package timesfm), built from these
    hyper-parameters (the class reads its architecture from a TimesFM_2p5_200M_Definition, the 200M one unless given
    another); --pretrained loads a published checkpoint (google/timesfm-2.5-200m-pytorch: the folder `huggingface-cli
    download` gives, or its model.safetensors) into it. Its architecture is read from the tensors' shapes: the folder
    holds no configuration of it (the quantile levels, which no shape shows, are the package's deciles).

    The forecast is TimesFM_2p5_200M_torch.forecast's after compile(ForecastConfig(max_context=context_length,
    max_horizon=output_token_len, ...)), its arithmetic (the module's decode and the compiled decode around it) redone
    here with the publisher's modules and functions, because its API runs under no_grad on NumPy arrays: each channel
    on its own; the window cut to its last context_length points (rounded up to a whole number of patches) and padded
    in front with masked zeros to whole patches; with normalize_inputs scaled by its mean and standard deviation;
    with force_flip_invariance forecast both as it is and negated, the two averaged (the negated quantiles in reverse
    order); the mean and quantile_levels of `horizon` points from the last patch, and beyond them the publisher's
    autoregressive decoding: the median of each output patch fed back as the next horizon / patch_len patches (their
    running statistics continuing the context's) until output_token_len points are forecast.
    With use_continuous_quantile_head each quantile other than the median is the median plus its offset from the
    median in the quantile head's forecast (so the forecast must stay within quantile_horizon); fix_quantile_crossing
    makes the quantiles monotone outwards from the median; infer_is_positive clips the forecast of a window with no
    negative point at 0. A point loss gets the median (the API's point forecast); --loss quantile gets every level
    (its --quantiles must be quantile_levels). The five forecasting options default to the model card's
    recommendation (all on; the package's ForecastConfig defaults normalize_inputs, use_continuous_quantile_head and
    fix_quantile_crossing to off).

    Deviations, none of which changes a forecast beyond rounding: the output heads are applied to the last patch
    alone (the publisher applies them to every patch and keeps the last); the window and its negation are decoded in
    one batch (the publisher decodes them one after the other); the context is padded to whole patches only, not to
    a compiled max_context (the publisher's further padding is masked, and the mean and standard deviation it then
    includes in normalize_inputs' are undone by the network's own normalisation: the forecast is the same up to
    rounding); with gradients (training) each step beyond the first output patch runs the network over the whole
    sequence so far rather than over its new patches with the publisher's key-value cache, which the layers write
    into in place (neither backward nor activation checkpointing could run over it). Missing values (NaN) are not
    interpolated as the API's are: windows have none. Covariates (XReg) and backcasts are not used.

    Defaults are google/timesfm-2.5-200m-pytorch's configuration (231M parameters, 28M of them the quantile head).
    """
    capabilities = Capabilities(direct=True, covariate=False, multi_output=True)
    head_modules = ("network.output_projection_point", "network.output_projection_quantiles")

    @dataclass
    class Config:
        d_model: int = d_model(1280)
        n_heads: int = n_heads(16)
        e_layers: int = e_layers(20)
        d_ff: int = d_ff(1280)
        patch_len: int = hparam(32, "points per input patch (and the stride between patches)", tiny=2, low=1)
        horizon: int = horizon_hparam(128, tiny=4)  # a multiple of patch_len: the median is fed back in patches
        quantile_horizon: int = hparam(1024, "points the continuous quantile head forecasts in one forward",
                                       tiny=64, low=1)
        quantile_levels: str = quantile_levels_hparam()
        # TimesFM's max_context, rounded up to a multiple of patch_len; context and forecast (each rounded up to whole
        # patches) must fit in its context limit of 16384 points
        context_length: int = context_length_hparam(16384, tiny=16384)
        normalize_inputs: bool = hparam(True, "scale each window by its mean and standard deviation before the "
                                              "network (TimesFM's normalize_inputs)")
        use_continuous_quantile_head: bool = hparam(True, "quantiles from the quantile head's forecast of their "
                                                          "offsets from the median (TimesFM's "
                                                          "use_continuous_quantile_head)")
        force_flip_invariance: bool = hparam(True, "average the forecast with the negated forecast of the negated "
                                                   "window (TimesFM's force_flip_invariance)")
        infer_is_positive: bool = hparam(True, "clip at 0 the forecast of a window with no negative point "
                                               "(TimesFM's infer_is_positive)")
        fix_quantile_crossing: bool = hparam(True, "make the quantiles monotone outwards from the median "
                                                   "(TimesFM's fix_quantile_crossing)")

    def __init__(self, configs):
        super().__init__()
        limit = package(BASE, DISTRIBUTION).TimesFM_2p5_200M_Definition.context_limit
        quantiles, self.median = quantile_outputs(configs)
        if configs.force_flip_invariance and any(abs(a + b - 1) > 1e-9 for a, b in zip(quantiles, quantiles[::-1])):
            raise ValueError(f"quantile_levels {configs.quantile_levels}: force_flip_invariance needs levels "
                             "symmetric about 0.5 (q and 1 - q)")
        if configs.d_model % configs.n_heads:
            raise ValueError(f"d_model {configs.d_model} must be a multiple of n_heads {configs.n_heads}")
        if configs.horizon % configs.patch_len:
            raise ValueError(f"horizon {configs.horizon} must be a multiple of patch_len {configs.patch_len}: its "
                             "forecast is fed back as whole patches")
        p = configs.patch_len
        self.context = min(configs.seq_len, -(-configs.context_length // p) * p)  # compile's max_context, rounded up
        forecast = -(-configs.output_token_len // configs.horizon) * configs.horizon  # compile's max_horizon
        if -(-self.context // p) * p + forecast > limit:
            raise ValueError(f"a context of {self.context} and a forecast of {configs.output_token_len} points "
                             f"(rounded up to patches of {p} and {configs.horizon}) exceed TimesFM's context limit of "
                             f"{limit} points: give a shorter --context_length")
        if configs.use_continuous_quantile_head and forecast > configs.quantile_horizon:
            raise ValueError(f"use_continuous_quantile_head forecasts at most quantile_horizon "
                             f"{configs.quantile_horizon} points (output_token_len {configs.output_token_len} rounded "
                             f"up to {forecast}): turn it off (--no-use_continuous_quantile_head) for longer forecasts")
        self.out_len, self.n_outputs = configs.output_token_len, configs.n_outputs
        self.decode_index = 1 + self.median  # among the network's outputs: the mean, then the quantiles
        self.patch_len = p
        self.normalize_inputs, self.continuous = configs.normalize_inputs, configs.use_continuous_quantile_head
        self.flip, self.positive = configs.force_flip_invariance, configs.infer_is_positive
        self.fix_crossing = configs.fix_quantile_crossing
        self.network = network(definition(configs))

    @staticmethod
    def published(path: str) -> Published:
        shapes = checkpoint_shapes(path)
        if not set(NEEDED) <= shapes.keys():
            raise ValueError(f"expected {WHAT}, found {describe(path, shapes)}")
        quantiles = package(BASE, DISTRIBUTION).TimesFM_2p5_200M_Definition().quantiles  # no shape shows them
        q = len(quantiles) + 1  # outputs per point: the mean, then the quantiles
        model_dims = shapes["tokenizer.output_layer.weight"][0]
        hparams = {"d_model": model_dims,
                   "n_heads": model_dims // shapes["stacked_xf.0.attn.per_dim_scale.per_dim_scale"][0],
                   "e_layers": len({k.split(".")[1] for k in shapes if k.startswith("stacked_xf.")}),
                   "d_ff": shapes["stacked_xf.0.ff0.weight"][0],
                   "patch_len": shapes["tokenizer.hidden_layer.weight"][1] // 2,
                   "horizon": shapes["output_projection_point.output_layer.weight"][0] // q,
                   "quantile_horizon": shapes["output_projection_quantiles.output_layer.weight"][0] // q,
                   "quantile_levels": ",".join(str(level) for level in quantiles)}
        try:
            with torch.device("meta"):  # the architecture these make, its tensors' shapes only
                made = network(definition(_Sizes(**hparams)))
            expected = {k: tuple(v.shape) for k, v in made.state_dict().items()}
        except (ValueError, ZeroDivisionError, RuntimeError) as e:
            raise ValueError(f"expected {WHAT}, found tensors of shapes no TimesFM 2.5 has ({hparams}: {e})") from None
        if expected != shapes:
            differ = sorted(set(expected) ^ set(shapes)) or [k for k in expected if expected[k] != shapes[k]]
            raise ValueError(f"expected {WHAT} with the shapes of d_model {hparams['d_model']}, n_heads "
                             f"{hparams['n_heads']}, e_layers {hparams['e_layers']}, patch_len {hparams['patch_len']}; "
                             f"found tensors that differ: "
                             + ", ".join(f"{k} {shapes.get(k, 'absent')} (expected {expected.get(k, 'none')})"
                                         for k in differ[:4]))
        limit = package(BASE, DISTRIBUTION).TimesFM_2p5_200M_Definition.context_limit
        return Published(hparams, max_seq_len=limit - hparams["horizon"])

    def load_published(self, path: str) -> None:
        safetensors = package("safetensors.torch", DISTRIBUTION)
        self.published(path)  # ValueError naming what it found where it is not a checkpoint
        weights = safetensors.load_file(weights_file(path))
        try:
            self.network.load_state_dict(weights, strict=True)
        except RuntimeError as e:
            raise ValueError(f"the checkpoint's architecture is not this model's: {str(e).splitlines()[-1].strip()}"
                             ) from None

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        return per_series(self._values, x, self.n_outputs)

    def _values(self, context: torch.Tensor) -> torch.Tensor:
        """(series, output_token_len, k): every quantile, or the median alone (the forecast's values are the mean,
        then the quantiles)."""
        quantiles = self.forecast(context)[..., 1:]
        return quantiles if self.n_outputs > 1 else quantiles[..., self.median:self.median + 1]

    def forecast(self, context: torch.Tensor) -> torch.Tensor:
        """TimesFM_2p5_200M_torch.forecast (its compiled decode) on a batch of contexts (series, time): the mean and
        quantiles (series, output_token_len, 1 + Q), its quantile_forecast."""
        util = package(UTIL, DISTRIBUTION)
        context = context[:, -self.context:]
        pad = -context.shape[1] % self.patch_len
        inputs = nn.functional.pad(context, (pad, 0))
        masks = (torch.arange(inputs.shape[1], device=inputs.device) < pad).expand(inputs.shape[0], -1)
        positive = torch.all(inputs >= 0, dim=-1, keepdim=True) if self.positive else None
        if self.normalize_inputs:
            mu, sigma = torch.mean(inputs, dim=-1, keepdim=True), torch.std(inputs, dim=-1, keepdim=True)
            inputs = util.revin(inputs, mu, sigma, reverse=False)
        if self.flip:
            both, spread = self.decode(torch.cat([inputs, -inputs]), torch.cat([masks, masks]))
            forecast, flipped = both.chunk(2)
            forecast = (forecast - _flip_quantiles(flipped)) / 2
            if spread is not None:
                spread, flipped = spread.chunk(2)
                spread = (spread - _flip_quantiles(flipped)) / 2
        else:
            forecast, spread = self.decode(inputs, masks)
        median = self.decode_index
        if self.continuous:  # each quantile: the median plus the quantile head's offset of it from its median
            offsets = spread[:, :forecast.shape[1]] - spread[:, :forecast.shape[1], median:median + 1]
            index = torch.arange(forecast.shape[-1], device=forecast.device)
            keep = (index == 0) | (index == median)  # the mean and the median stay the point head's
            forecast = torch.where(keep, forecast, offsets + forecast[..., median:median + 1])
        forecast = forecast[:, :self.out_len]
        if self.fix_crossing:
            columns = list(forecast.unbind(-1))
            for i in range(median - 1, 0, -1):
                columns[i] = torch.where(columns[i] < columns[i + 1], columns[i], columns[i + 1])
            for i in range(median + 1, len(columns)):
                columns[i] = torch.where(columns[i] > columns[i - 1], columns[i], columns[i - 1])
            forecast = torch.stack(columns, dim=-1)
        if self.normalize_inputs:
            forecast = util.revin(forecast, mu, sigma, reverse=True)
        if positive is not None:
            forecast = torch.where(positive[..., None], torch.maximum(forecast, torch.zeros_like(forecast)), forecast)
        return forecast

    def decode(self, inputs: torch.Tensor, masks: torch.Tensor) -> tuple:
        """TimesFM_2p5_200M_torch_module.decode for output_token_len points on padded contexts (series, time) and
        their masks: the forecast (series, output_token_len rounded up to horizon, 1 + Q) and the quantile head's
        (series, quantile_horizon, 1 + Q), in the contexts' scale."""
        util, net = package(UTIL, DISTRIBUTION), self.network
        S, p, m, q = inputs.shape[0], net.p, net.m, net.q
        steps = (self.out_len - 1) // net.o
        patches, patch_masks = inputs.reshape(S, -1, p), masks.reshape(S, -1, p)
        n = mu = sigma = torch.zeros(S, device=inputs.device)
        mus, sigmas = [], []
        for i in range(patches.shape[1]):  # the running statistics of the series up to each patch
            (n, mu, sigma), _ = util.update_running_stats(n, mu, sigma, patches[:, i], patch_masks[:, i])
            mus.append(mu)
            sigmas.append(sigma)
        mus, sigmas = torch.stack(mus, dim=1), torch.stack(sigmas, dim=1)
        # beyond one output patch, the publisher's key-value cache, which its layers write into in place, where no
        # gradient is wanted; with gradients each step runs the whole sequence again (the same numbers: the attention
        # is causal), since neither backward nor a layer's second run (activation checkpointing) may find its inputs
        # written over
        cached = steps > 0 and not torch.is_grad_enabled()
        caches = [util.DecodeCache(next_index=torch.zeros(S, dtype=torch.int32, device=inputs.device),
                                   num_masked=torch.zeros(S, dtype=torch.int32, device=inputs.device),
                                   key=inputs.new_zeros(S, patches.shape[1] + steps * m, net.h, net.hd),
                                   value=inputs.new_zeros(S, patches.shape[1] + steps * m, net.h, net.hd))
                  for _ in range(net.x)] if cached else None
        sequence = torch.where(patch_masks, 0.0, util.revin(patches, mus, sigmas, reverse=False))
        point, spread, caches = self._last_patch(sequence, patch_masks, caches, self.continuous)
        outputs = [util.revin(point, mus[:, -1], sigmas[:, -1], reverse=True).reshape(S, net.o, q)]
        if spread is not None:
            spread = util.revin(spread, mus[:, -1], sigmas[:, -1], reverse=True).reshape(S, net.os, q)
        for _ in range(steps):  # the median fed back, m patches at a time, their statistics continuing the context's
            new = outputs[-1][..., self.decode_index].reshape(S, m, p)
            new_masks = torch.zeros_like(new, dtype=torch.bool)
            mus, sigmas = [], []
            for i in range(m):
                (n, mu, sigma), _ = util.update_running_stats(n, mu, sigma, new[:, i], new_masks[:, i])
                mus.append(mu)
                sigmas.append(sigma)
            mus, sigmas = torch.stack(mus, dim=1), torch.stack(sigmas, dim=1)
            new = util.revin(new, mus, sigmas, reverse=False)
            if cached:
                point, _, caches = self._last_patch(new, new_masks, caches, False)
            else:
                sequence, patch_masks = torch.cat([sequence, new], dim=1), torch.cat([patch_masks, new_masks], dim=1)
                point, _, _ = self._last_patch(sequence, patch_masks, None, False)
            outputs.append(util.revin(point, mus[:, -1], sigmas[:, -1], reverse=True).reshape(S, net.o, q))
        return torch.cat(outputs, dim=1), spread

    def _last_patch(self, inputs: torch.Tensor, masks: torch.Tensor, caches: list, spread: bool) -> tuple:
        """TimesFM_2p5_200M_torch_module.forward with its output heads applied to the last patch only: the point
        head's output, the quantile head's (None unless `spread`) and the updated caches (None: none kept)."""
        net = self.network
        embeddings = net.tokenizer(torch.cat([inputs, masks.to(inputs.dtype)], dim=-1))
        updated = []
        for layer, cache in zip(net.stacked_xf, caches or [None] * net.x):
            embeddings, cache = layer(embeddings, masks[..., -1], cache)
            updated.append(cache)
        last = embeddings[:, -1]
        return net.output_projection_point(last), net.output_projection_quantiles(last) if spread else None, updated


def _flip_quantiles(x: torch.Tensor) -> torch.Tensor:
    """The publisher's flip_quantile_fn: the mean first, the quantiles in reverse order."""
    return torch.cat([x[..., :1], torch.flip(x[..., 1:], dims=(-1,))], dim=-1)


@dataclass
class _Sizes:
    """The architecture's hyper-parameters alone (what definition() reads of a Config)."""
    d_model: int
    n_heads: int
    e_layers: int
    d_ff: int
    patch_len: int
    horizon: int
    quantile_horizon: int
    quantile_levels: str


def definition(configs):
    """The publisher's TimesFM_2p5_200M_Definition with these sizes (the 200M one at the defaults): what is not a
    hyper-parameter (activations, norms, biases, rotary embeddings, fused qkv) is the published definition's."""
    published, replace = package(BASE, DISTRIBUTION).TimesFM_2p5_200M_Definition(), dataclasses.replace
    quantiles = list(levels(configs.quantile_levels))
    d, q = configs.d_model, len(quantiles) + 1  # outputs per point: the mean, then the quantiles
    transformer = replace(published.stacked_transformers.transformer, model_dims=d, hidden_dims=configs.d_ff,
                          num_heads=configs.n_heads)
    return replace(published, input_patch_len=configs.patch_len, output_patch_len=configs.horizon,
                   output_quantile_len=configs.quantile_horizon, quantiles=quantiles,
                   decode_index=1 + quantiles.index(0.5),
                   tokenizer=replace(published.tokenizer, input_dims=2 * configs.patch_len, hidden_dims=d,
                                     output_dims=d),
                   stacked_transformers=replace(published.stacked_transformers, num_layers=configs.e_layers,
                                                transformer=transformer),
                   output_projection_point=replace(published.output_projection_point, input_dims=d, hidden_dims=d,
                                                   output_dims=configs.horizon * q),
                   output_projection_quantiles=replace(published.output_projection_quantiles, input_dims=d,
                                                       hidden_dims=d, output_dims=configs.quantile_horizon * q))


def network(found) -> nn.Module:
    """The publisher's TimesFM_2p5_200M_torch_module with the architecture `found` (a TimesFM_2p5_200M_Definition):
    the class reads it from its attribute `config`, the 200M definition, which the instance's own replaces."""
    cls = package(TORCH, DISTRIBUTION).TimesFM_2p5_200M_torch_module
    module = cls.__new__(cls)
    module.config = found
    cls.__init__(module)
    return module


def weights_file(path: str) -> str:
    return os.path.join(path, WEIGHTS) if os.path.isdir(path) else path


def checkpoint_shapes(path: str) -> dict:
    """name -> shape of the tensors in the checkpoint at `path` (a folder with model.safetensors, or that file), read
    from its header alone; ValueError naming what it found where there is none."""
    safetensors = package("safetensors", DISTRIBUTION)
    file = weights_file(path)
    if not os.path.isfile(file):
        raise ValueError(f"expected {WHAT}, found {describe(path)}")
    try:
        with safetensors.safe_open(file, framework="pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as e:  # noqa: BLE001 - whatever safetensors fails on, the file is not one it reads
        raise ValueError(f"expected {WHAT}, found a {os.path.basename(file)} that safetensors cannot read "
                         f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None


def describe(path: str, shapes: dict | None = None) -> str:
    """What `path` holds, in a few words: its files, the model_type its config.json names, its tensors."""
    if not os.path.isdir(path):
        found = f"{len(shapes)} tensors ({', '.join(sorted(shapes)[:4])}, ...)" if shapes else "nothing"
        return f"a file of {found}" if os.path.isfile(path) else "nothing"
    files = sorted(os.listdir(path))
    found = [f"a folder of {', '.join(files[:5]) or 'nothing'}"]
    config = os.path.join(path, "config.json")
    if os.path.isfile(config):
        try:
            with open(config) as f:
                kind = json.load(f)
            kind = kind.get("model_type") or kind.get("architectures") if isinstance(kind, dict) else None
        except (OSError, ValueError):
            kind = None
        if kind:
            found.append(f"a config.json of model_type {kind}")
    if shapes:
        found.append(f"{WEIGHTS} of {len(shapes)} tensors ({', '.join(sorted(shapes)[:4])}, ...)")
    return "; ".join(found)
