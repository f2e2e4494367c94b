import math
from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, Published, d_ff, d_model, dropout, e_layers, hparam, n_heads
from models.layers.published import (
    context_length_hparam,
    horizon_hparam,
    levels,
    package,
    quantile_levels_hparam,
    quantile_outputs,
    read_config,
)

DISTRIBUTION = "chronos-forecasting"
# amazon/chronos-2's 21 quantile levels (its config.json's chronos_config.quantiles)
PUBLISHED_LEVELS = "0.01,0.05,0.1,0.15,0.2,0.25,0.3,0.35,0.4,0.45,0.5,0.55,0.6,0.65,0.7,0.75,0.8,0.85,0.9,0.95,0.99"
# Chronos2Pipeline.predict's default `unrolled_quantiles`: the quantile paths fed back beyond one forward's horizon
UNROLLED = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
# Chronos2Pipeline.predict's default batch_size: the series one forward reads (whole tasks, at least one)
PIPELINE_BATCH = 256
# the publisher's configuration that the hyper-parameters below do not set: every published Chronos-2 has it
FIXED = {"feed_forward_proj": "relu", "layer_norm_epsilon": 1e-6, "rope_theta": 10000.0}
FIXED_FORECASTING = {"use_reg_token": True, "use_arcsinh": True}


class Model(nn.Module):
    """Chronos-2: an encoder-only transformer over patches of a group of series, scaled each by its own mean and
    standard deviation and arcsinh, that attends along time within each series and across the series of a group at
    every patch (group attention), and forecasts quantiles of the next patches of every series at once.

    Ansari et al. "Chronos-2: From Univariate to Universal Forecasting." arXiv 2510.15821, 2025,
    https://arxiv.org/abs/2510.15821; code: https://github.com/amazon-science/chronos-forecasting
    (chronos/chronos2/, the package chronos-forecasting).

    The network is the publisher's own (Chronos2Model), built from these hyper-parameters; --pretrained loads a
    published checkpoint (amazon/chronos-2: the folder `huggingface-cli download` makes, config.json and
    model.safetensors) into it. The forecast is Chronos2Pipeline.predict's on a tensor (batch, variates, time): the
    window's C channels are one multivariate task of C variates (one group: every channel attends to the others),
    the window's last context_length points (a shorter one is left-padded to whole patches with missing values, as
    the network does), `horizon` points (horizon / patch_len output patches) in one forward, and beyond them the
    pipeline's long-horizon heuristic: each series' forecast at the unrolled quantile levels is appended to its
    context as a path of its own (one group per task and path), and the unrolled x quantile_levels forecasts, each
    weighted by the probability mass of its two levels, are reduced to the quantile_levels by their weighted
    empirical quantiles. A point loss gets the median (the pipeline's point forecast, predict_quantiles' `mean`);
    --loss quantile gets every level (its --quantiles must be quantile_levels).

    --covariate: the target (the last channel) and its past covariates (the others) are the publisher's
    `{"target": ..., "past_covariates": {...}}` task: the target first, then the covariates (in channel order), in one
    group, with no known future values. The target's forecast is the pipeline's; the covariates' are the network's
    own forecasts of those rows, which the pipeline computes and drops, and which are returned here so that the
    framework can roll the forecast beyond output_token_len (not exogenous).

    Deviations: none in the arithmetic. The forward redoes Chronos2Pipeline._predict_batch's loop on the tensor
    device with the publisher's network and functions (chronos.utils.interpolate_quantiles, weighted_quantile)
    because the pipeline runs under no_grad; it is equal to the pipeline (tests/unit/test_foundation_chronos2.py).
    The windows are forecast in chunks of whole tasks of at least PIPELINE_BATCH series, as the pipeline batches them
    by default (batch_size 256). Beyond the horizon the unrolled levels are the pipeline's default (0.1, 0.2, ...,
    0.9) where quantile_levels has all of them (every published Chronos-2); otherwise, where the pipeline would
    refuse its default, all of quantile_levels (the pipeline's `unrolled_quantiles=quantile_levels`). Dropout
    (dropout_rate 0.1 in the published configuration) is active in training mode, as in the publisher's fit.

    Defaults are amazon/chronos-2's configuration (120M parameters; the package's Chronos2CoreConfig defaults are
    not it).
    """
    capabilities = Capabilities(direct=True, covariate=True, multi_output=True)
    head_modules = ("chronos.output_patch_embedding",)

    @dataclass
    class Config:
        d_model: int = d_model(768)
        d_ff: int = d_ff(3072)
        d_kv: int = hparam(64, "width of each attention head's keys and values (even: rotary embeddings)", tiny=8,
                           low=1)
        n_heads: int = n_heads(12)
        e_layers: int = e_layers(12)
        dropout: float = dropout(0.1)
        patch_len: int = hparam(16, "points per input and output patch (and the stride between input patches)",
                                tiny=2, low=1)
        context_length: int = context_length_hparam(8192, tiny=32)
        horizon: int = horizon_hparam(1024, tiny=8)
        time_encoding_scale: int = hparam(8192, "the time index fed with every point of a patch is its position "
                                                "divided by this (the context length the network was trained at)",
                                          tiny=32, low=1)
        quantile_levels: str = quantile_levels_hparam(PUBLISHED_LEVELS)

    def __init__(self, configs):
        super().__init__()
        chronos2 = package("chronos.chronos2", DISTRIBUTION)
        pipeline = package("chronos.chronos2.pipeline", DISTRIBUTION)
        if configs.horizon % configs.patch_len:
            raise ValueError(f"horizon {configs.horizon} must be a whole number of patches of patch_len "
                             f"{configs.patch_len} (Chronos-2 forecasts max_output_patches patches per forward)")
        quantiles, self.median = quantile_outputs(configs)
        self.out_len, self.n_outputs = configs.output_token_len, configs.n_outputs
        self.covariate = bool(getattr(configs, "covariate", False))
        self.context_length, self.patch_len = configs.context_length, configs.patch_len
        self.max_output_patches = configs.horizon // configs.patch_len
        unrolled = UNROLLED if set(UNROLLED) <= set(quantiles) else quantiles
        self.register_buffer("levels", torch.tensor(quantiles), persistent=False)
        self.register_buffer("unrolled", torch.tensor(unrolled), persistent=False)
        mass = pipeline.Chronos2Pipeline._get_prob_mass_per_quantile_level
        self.register_buffer("weights", torch.outer(mass(self.unrolled), mass(self.levels)).flatten(),
                             persistent=False)
        self.chronos = chronos2.Chronos2Model(chronos2.Chronos2CoreConfig(**architecture(configs)))

    @staticmethod
    def published(path: str) -> Published:
        found = read_config(path, "a Chronos-2 checkpoint")
        if found.get("chronos_pipeline_class") != "Chronos2Pipeline":
            what = found.get("chronos_pipeline_class") or found.get("model_type") or "neither"
            raise ValueError("expected a Chronos-2 checkpoint (chronos_pipeline_class Chronos2Pipeline in "
                             f"config.json), found {what}")
        if found.get("architectures") != ["Chronos2Model"] or not isinstance(found.get("chronos_config"), dict):
            raise ValueError("expected a Chronos-2 checkpoint (architectures [Chronos2Model] and a chronos_config in "
                             f"config.json), found architectures {found.get('architectures')}")
        chronos = found["chronos_config"]
        patch = chronos.get("input_patch_size")
        if not patch or chronos.get("input_patch_stride") != patch or chronos.get("output_patch_size") != patch:
            raise ValueError("expected input and output patches of one size that do not overlap, as every published "
                             f"Chronos-2 has; found {chronos}")
        for key, value in FIXED_FORECASTING.items():
            if chronos.get(key, False) != value:
                raise ValueError(f"expected chronos_config {key} {value}, as every published Chronos-2 has; found "
                                 f"{chronos.get(key, False)}")
        for key, value in FIXED.items():
            if key in found and found[key] != value:
                raise ValueError(f"expected {key} {value}, as every published Chronos-2 has; found {found[key]}")
        hparams = {"d_model": found["d_model"], "d_ff": found["d_ff"], "d_kv": found["d_kv"],
                   "n_heads": found["num_heads"], "e_layers": found["num_layers"], "patch_len": patch,
                   "context_length": chronos["context_length"],
                   "horizon": chronos.get("max_output_patches", 1) * patch,
                   "time_encoding_scale": chronos.get("time_encoding_scale") or chronos["context_length"],
                   "quantile_levels": ",".join(str(q) for q in chronos["quantiles"])}
        return Published(hparams, max_seq_len=chronos["context_length"],
                         defaults={"dropout": found.get("dropout_rate", 0.1)})

    def load_published(self, path: str) -> None:
        chronos2 = package("chronos.chronos2", DISTRIBUTION)
        loaded, info = chronos2.Chronos2Model.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
        problems = {key: value for key, value in info.items() if value}
        if problems:
            raise ValueError(f"expected every tensor of a Chronos-2 checkpoint in {path}, found {problems}")
        self.chronos.load_state_dict(loaded.state_dict(), strict=True)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        B, L, C = x.shape
        tasks = x.transpose(1, 2)  # (B, C, L): a task of C variates per window
        if self.covariate:
            tasks = tasks.roll(1, dims=1)  # the target first, then its past covariates: the publisher's order
        per_forward = max(1, math.ceil(PIPELINE_BATCH / C))  # the pipeline's batches of whole tasks
        quantiles = torch.cat([self.forecast(chunk) for chunk in tasks.split(per_forward)])  # (B, C, Q, T)
        if self.covariate:
            quantiles = quantiles.roll(-1, dims=1)
        out = quantiles.permute(0, 3, 1, 2)  # (B, T, C, Q)
        return out if self.n_outputs > 1 else out[..., self.median]

    def forecast(self, tasks: torch.Tensor) -> torch.Tensor:
        """Chronos2Pipeline.predict on tasks (tasks, variates, time): quantiles (tasks, variates, Q, output_token_len)
        (its _predict_batch, on the device and with gradients)."""
        utils = package("chronos.utils", DISTRIBUTION)
        n_tasks, n_variates, _ = tasks.shape
        context = tasks.reshape(n_tasks * n_variates, -1)[:, -self.context_length:]
        group_ids = torch.arange(n_tasks, device=tasks.device).repeat_interleave(n_variates)
        prediction = self.step(context, group_ids, self.out_len)
        predictions, remaining = [prediction], self.out_len - prediction.shape[-1]
        n_paths = len(self.unrolled)
        if remaining > 0:
            context = context.unsqueeze(1).repeat(1, n_paths, 1)  # (series, paths, time)
            group_ids = group_ids.unsqueeze(1) * n_paths + torch.arange(n_paths, device=tasks.device)
        while remaining > 0:
            path = utils.interpolate_quantiles(query_quantile_levels=self.unrolled,
                                               original_quantile_levels=self.levels,
                                               original_values=prediction.transpose(1, 2)).transpose(1, 2)
            context = torch.cat([context, path], dim=-1)[..., -self.context_length:]
            series = context.shape[0]
            prediction = self.step(context.flatten(0, 1), group_ids.flatten(), remaining)  # (series * paths, Q, h)
            samples = prediction.unflatten(0, (series, n_paths)).flatten(1, 2).transpose(1, 2)  # (series, h, paths*Q)
            prediction = utils.weighted_quantile(query_quantile_levels=self.levels, sample_weights=self.weights,
                                                 samples=samples).transpose(1, 2)
            predictions.append(prediction)
            remaining -= prediction.shape[-1]
        out = torch.cat(predictions, dim=-1)[..., :self.out_len]
        return out.unflatten(0, (n_tasks, n_variates))

    def step(self, context: torch.Tensor, group_ids: torch.Tensor, remaining: int) -> torch.Tensor:
        """One forward of the network (Chronos2Pipeline._predict_step without future covariates): the quantiles of the
        output patches that cover `remaining` points, at most max_output_patches of them."""
        patches = min(math.ceil(remaining / self.patch_len), self.max_output_patches)
        return self.chronos(context=context, group_ids=group_ids, num_output_patches=patches).quantile_preds.to(context)


def architecture(configs) -> dict:
    """The publisher's Chronos2CoreConfig fields for these hyper-parameters (what its config.json holds)."""
    return {"d_model": configs.d_model, "d_kv": configs.d_kv, "d_ff": configs.d_ff, "num_layers": configs.e_layers,
            "num_heads": configs.n_heads, "dropout_rate": configs.dropout, **FIXED, "initializer_factor": 0.05,
            "vocab_size": 2, "pad_token_id": 0, "reg_token_id": 1,
            "chronos_config": {"context_length": configs.context_length, "input_patch_size": configs.patch_len,
                               "input_patch_stride": configs.patch_len, "output_patch_size": configs.patch_len,
                               "max_output_patches": configs.horizon // configs.patch_len,
                               "quantiles": list(levels(configs.quantile_levels)),
                               "time_encoding_scale": configs.time_encoding_scale, **FIXED_FORECASTING},
            "chronos_pipeline_class": "Chronos2Pipeline", "architectures": ["Chronos2Model"]}
