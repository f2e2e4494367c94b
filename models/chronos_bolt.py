from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, Published, d_ff, d_model, dropout, e_layers, hparam, n_heads
from models.layers.outputs import per_series
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
# the publisher's configuration that the hyper-parameters below do not set: every published Chronos-Bolt has it
FIXED = {"feed_forward_proj": "relu", "is_gated_act": False, "dense_act_fn": "relu",
         "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128, "layer_norm_epsilon": 1e-6}


class Model(nn.Module):
    """Chronos-Bolt: a T5 encoder-decoder over patches of a series, scaled by its own mean and standard deviation,
    that forecasts quantiles of the next `horizon` points at once.

    Ansari et al. "Chronos: Learning the Language of Time Series." TMLR 2024, https://arxiv.org/abs/2403.07815;
    Chronos-Bolt: https://github.com/amazon-science/chronos-forecasting (chronos/chronos_bolt.py).

    The network is the publisher's own (ChronosBoltModelForForecasting of the package chronos-forecasting), built
    from these hyper-parameters; --pretrained loads a published checkpoint (amazon/chronos-bolt-tiny, -mini,
    -small, -base) into it. The forecast is ChronosBoltPipeline.predict's: the last context_length points of each
    channel on its own (channel-independent), quantiles of `horizon` points in one forward, and beyond them the
    pipeline's heuristic: each quantile's path is fed back as context and the quantile_levels x quantile_levels
    forecasts are reduced to the quantile_levels by empirical quantiles. A point loss gets the median (the
    pipeline's point forecast); --loss quantile gets every level (its --quantiles must be quantile_levels).

    Defaults are chronos-bolt-small's configuration (48M parameters).
    """
    capabilities = Capabilities(direct=True, covariate=False, multi_output=True)
    head_modules = ("chronos.output_patch_embedding",)

    @dataclass
    class Config:
        d_model: int = d_model(512)
        d_ff: int = d_ff(2048)
        d_kv: int = hparam(64, "width of each attention head's keys and values (T5's d_kv)", tiny=8, low=1)
        n_heads: int = n_heads(8)
        e_layers: int = e_layers(6)
        d_layers: int = hparam(6, "number of decoder layers", tiny=1, low=1)
        dropout: float = dropout(0.1)
        patch_len: int = hparam(16, "points per input patch (and the stride between patches)", tiny=4, low=1)
        context_length: int = context_length_hparam(2048, tiny=32)
        horizon: int = horizon_hparam(64, tiny=4)
        quantile_levels: str = quantile_levels_hparam()

    def __init__(self, configs):
        super().__init__()
        chronos_bolt = package("chronos.chronos_bolt", DISTRIBUTION)
        transformers = package("transformers", DISTRIBUTION)
        quantiles, self.median = quantile_outputs(configs)
        self.out_len, self.n_outputs = configs.output_token_len, configs.n_outputs
        self.context_length, self.horizon = configs.context_length, configs.horizon
        self.register_buffer("levels", torch.tensor(quantiles), persistent=False)
        self.chronos = chronos_bolt.ChronosBoltModelForForecasting(transformers.T5Config(**architecture(configs)))

    @staticmethod
    def published(path: str) -> Published:
        found = read_config(path, "a Chronos-Bolt checkpoint")
        if found.get("chronos_pipeline_class") != "ChronosBoltPipeline":
            raise ValueError(f"expected a Chronos-Bolt checkpoint (chronos_pipeline_class ChronosBoltPipeline in "
                             f"config.json), found {found.get('chronos_pipeline_class') or found.get('model_type')}")
        chronos = found["chronos_config"]
        if chronos["input_patch_stride"] != chronos["input_patch_size"] or not chronos.get("use_reg_token"):
            raise ValueError("expected patches that do not overlap and a [REG] token, as every published "
                             f"Chronos-Bolt has; found {chronos}")
        for key, value in FIXED.items():
            if key in found and found[key] != value:
                raise ValueError(f"expected {key} {value}, as every published Chronos-Bolt has; found {found[key]}")
        hparams = {"d_model": found["d_model"], "d_ff": found["d_ff"], "d_kv": found["d_kv"],
                   "n_heads": found["num_heads"], "e_layers": found["num_layers"],
                   "d_layers": found.get("num_decoder_layers") or found["num_layers"],
                   "patch_len": chronos["input_patch_size"],
                   "context_length": chronos["context_length"], "horizon": chronos["prediction_length"],
                   "quantile_levels": ",".join(str(q) for q in chronos["quantiles"])}
        return Published(hparams, max_seq_len=chronos["context_length"], defaults={"dropout": found["dropout_rate"]})

    def load_published(self, path: str) -> None:
        chronos_bolt = package("chronos.chronos_bolt", DISTRIBUTION)
        loaded = chronos_bolt.ChronosBoltModelForForecasting.from_pretrained(path, dtype=torch.float32)
        self.chronos.load_state_dict(loaded.state_dict(), strict=True)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        return per_series(self._values, x, self.n_outputs)

    def _values(self, context: torch.Tensor) -> torch.Tensor:
        """(series, output_token_len, k): every quantile, or the median alone."""
        quantiles = self.forecast(context).transpose(1, 2)
        return quantiles if self.n_outputs > 1 else quantiles[..., self.median:self.median + 1]

    def forecast(self, context: torch.Tensor) -> torch.Tensor:
        """ChronosBoltPipeline.predict on a batch of contexts (series, time): quantiles (series, Q, output_token_len)
        (the pipeline's own loop, on the device)."""
        context = context[:, -self.context_length:]
        prediction = self.chronos(context=context).quantile_preds.to(context)
        predictions, remaining = [prediction], self.out_len - prediction.shape[-1]
        if remaining > 0:
            context = context.unsqueeze(1).repeat(1, len(self.levels), 1)
        while remaining > 0:
            context = torch.cat([context, prediction], dim=-1)[..., -self.context_length:]
            series, n_quantiles, length = context.shape
            prediction = self.chronos(context=context.reshape(series * n_quantiles, length)).quantile_preds.to(context)
            prediction = prediction.reshape(series, n_quantiles * n_quantiles, -1)
            prediction = torch.quantile(prediction, q=self.levels, dim=1).transpose(0, 1)
            predictions.append(prediction)
            remaining -= prediction.shape[-1]
        return torch.cat(predictions, dim=-1)[..., :self.out_len]


def architecture(configs) -> dict:
    """The publisher's T5Config fields for these hyper-parameters (what its config.json holds)."""
    return {"d_model": configs.d_model, "d_ff": configs.d_ff, "d_kv": configs.d_kv, "num_heads": configs.n_heads,
            "num_layers": configs.e_layers, "num_decoder_layers": configs.d_layers, "dropout_rate": configs.dropout,
            "feed_forward_proj": FIXED["feed_forward_proj"],
            "relative_attention_num_buckets": FIXED["relative_attention_num_buckets"],
            "relative_attention_max_distance": FIXED["relative_attention_max_distance"],
            "layer_norm_epsilon": FIXED["layer_norm_epsilon"], "initializer_factor": 0.05, "is_encoder_decoder": True,
            "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1,
            "chronos_config": {"context_length": configs.context_length, "prediction_length": configs.horizon,
                               "input_patch_size": configs.patch_len, "input_patch_stride": configs.patch_len,
                               "quantiles": list(levels(configs.quantile_levels)), "use_reg_token": True},
            "chronos_pipeline_class": "ChronosBoltPipeline", "architectures": ["ChronosBoltModelForForecasting"]}
