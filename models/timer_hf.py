import os
from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, Published, d_ff, d_model, dropout, e_layers, hparam, n_heads
from models.layers.outputs import per_series
from models.layers.published import load_safetensors, mapped_state, read_config
from models.layers.transformer import MultiHeadAttention, SwiGLU, init_linear, rotary_tables

WHAT = "a Timer checkpoint (model_type timer, as thuml/timer-base-84m)"
INIT_STD = 0.02  # the publisher's initializer_range: Linear weights ~ N(0, 0.02), biases 0
# what the publisher's TimerConfig assumes where a config.json leaves a field out
CONFIG_DEFAULTS = {"input_token_len": 1, "hidden_size": 1024, "intermediate_size": 2048,
                   "output_token_lens": [1, 8, 32, 64], "num_hidden_layers": 8, "num_attention_heads": 8,
                   "hidden_act": "silu", "use_cache": True, "attention_dropout": 0.0}


class DecoderLayer(nn.Module):
    """Post-LayerNorm decoder layer: x = norm1(x + causal rotary attention(x)); norm2(x + SwiGLU(x)). Queries, keys
    and values have biases, the attention's output projection has none."""

    def __init__(self, d: int, heads: int, hidden: int, dropout: float):
        super().__init__()
        self.attention = MultiHeadAttention(d, heads, dropout)  # dropout on the attention weights, in training
        self.attention.out = nn.Linear(d, d, bias=False)
        self.ffn = SwiGLU(d, hidden)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)

    def forward(self, h: torch.Tensor, rotary) -> torch.Tensor:
        h = self.norm1(h + self.attention(h, rotary=rotary, is_causal=True))
        return self.norm2(h + self.ffn(h))


class Model(nn.Module):
    """Timer as thuml publishes it on Hugging Face (thuml/timer-base-84m: config.json of model_type "timer" and
    model.safetensors, the publisher's TimerForPrediction): a decoder-only Transformer over patches of one series,
    whose generate(seqs, max_new_tokens=H) is the forecast.

    Liu, Zhang, Li, Wang, Wang, Long. "Timer: Generative Pre-trained Transformers Are Large Time Series Models."
    ICML 2024. https://arxiv.org/abs/2402.02368 - the checkpoint: https://huggingface.co/thuml/timer-base-84m
    (its modeling_timer.py, ts_generation_mixin.py).

    Every channel is its own series (the published model is univariate). The last whole patches of patch_len
    points of the window (generate drops the points before them) are scaled by the window's mean and standard
    deviation (its revin, on by default in generate), embedded by a bias-free linear map, and passed through
    e_layers post-LayerNorm decoder layers: causal attention with rotary position embedding over the whole head on
    the patch index (base 10000), then a bias-free SwiGLU block; a final LayerNorm; bias-free linear output heads,
    one per length of output_heads. --pretrained loads a published checkpoint into it (its architecture from
    config.json); without it the model trains from the publisher's initialisation. The patch is patch_len (the
    checkpoint's input_token_len), a hyper-parameter as every published model's here: a direct model's
    --input_token_len is no part of its run's identity.

    The forecast of output_token_len points is generate's, step for step: each step takes the longest head that
    fits in the points still to forecast (the first head when none does), reads it after the last patch, cuts it
    to those points and undoes the scaling; the points forecast become the next patches of the sequence, scaled
    by their own mean and standard deviation (generate's revin with its key-value cache sees only the new
    points), with the whole sequence since the window began as context. The cache is not kept: each step runs
    the whole sequence again, which gives what the cache gives (attention is causal). As that scaling undoes any
    scale and shift of the input, the framework's per-dataset standardisation leaves the forecast as it is (up
    to rounding), and the per-series standardisation of the publisher's usage example is already generate's.

    Deviations: a window or forecast whose standard deviation is 0 (or undefined) is scaled by 1, where generate
    returns NaN. A test horizon beyond output_token_len (--test_pred_len) is rolled out by the framework, which
    feeds the last seq_len points back to a new forecast (scaled as one window): for the publisher's forecast of
    H points give --output_token_len H. A config.json with use_cache false (generate then scales the whole
    growing sequence at each step) or another hidden_act than silu is refused; rope_theta is read by neither
    (the publisher's rotary embedding always has base 10000).

    Defaults are timer-base-84m's configuration (84M parameters).
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=False)
    head_modules = ("heads",)

    @dataclass
    class Config:
        d_model: int = d_model(1024)
        n_heads: int = n_heads(8)
        e_layers: int = e_layers(8)
        d_ff: int = d_ff(2048)
        dropout: float = dropout(0.0)
        patch_len: int = hparam(96, "points per input patch (and the stride between patches)", tiny=8, low=1)
        output_heads: str = hparam("96", "lengths of the output heads, comma-separated and increasing, each a "
                                         "multiple of patch_len: each step of a forecast uses the longest that "
                                         "fits (the publisher's output_token_lens)", tiny="8,16")

    def __init__(self, configs):
        super().__init__()
        if configs.n_outputs != 1:
            raise ValueError(f"forecasts one value per point, not {configs.n_outputs}")
        self.patch_len, self.out_len = configs.patch_len, configs.output_token_len
        self.head_lens = head_lengths(configs.output_heads, self.patch_len)
        if configs.d_model % configs.n_heads or (configs.d_model // configs.n_heads) % 2:
            raise ValueError(f"Timer needs d_model {configs.d_model} divisible by n_heads {configs.n_heads} and an "
                             "even head size (rotary embedding)")
        if configs.seq_len < self.patch_len:
            raise ValueError(f"seq_len {configs.seq_len} is shorter than one patch (patch_len {self.patch_len})")
        self.head_dim = configs.d_model // configs.n_heads
        self.architecture = {"d_model": configs.d_model, "n_heads": configs.n_heads, "e_layers": configs.e_layers,
                             "d_ff": configs.d_ff, "patch_len": self.patch_len,
                             "output_heads": ",".join(map(str, self.head_lens))}
        self.embedding = nn.Linear(self.patch_len, configs.d_model, bias=False)
        self.layers = nn.ModuleList(DecoderLayer(configs.d_model, configs.n_heads, configs.d_ff, configs.dropout)
                                    for _ in range(configs.e_layers))
        self.norm = nn.LayerNorm(configs.d_model)
        self.heads = nn.ModuleList(nn.Linear(configs.d_model, length, bias=False) for length in self.head_lens)
        init_linear(self, INIT_STD)

    @staticmethod
    def published(path: str) -> Published:
        config = thuml_config(path, "timer", WHAT, CONFIG_DEFAULTS, "scales the whole growing sequence at each step, "
                                                                    "which this model does not")
        lengths = config["output_token_lens"]
        if not isinstance(lengths, list) or not lengths:
            raise ValueError(f"expected output_token_lens, a list of head lengths; found {lengths!r}")
        hparams = {"d_model": config["hidden_size"], "n_heads": config["num_attention_heads"],
                   "e_layers": config["num_hidden_layers"], "d_ff": config["intermediate_size"],
                   "patch_len": config["input_token_len"], "output_heads": ",".join(str(n) for n in lengths)}
        try:
            head_lengths(hparams["output_heads"], hparams["patch_len"])
        except ValueError:
            raise ValueError(f"expected output_token_lens that increase, each a multiple of input_token_len "
                             f"{hparams['patch_len']} (the forecast appends whole patches); found {lengths}") from None
        return Published(hparams, defaults={"dropout": config["attention_dropout"]})

    def load_published(self, path: str) -> None:
        load_safetensors(self, path, WHAT)

    def from_published(self, weights: dict) -> dict:
        """This model's state dict from the publisher's (TimerForPrediction's keys); ValueError naming the keys
        missing, unexpected or of another shape."""
        return mapped_state(weights, published_names(len(self.layers), len(self.heads)), self.state_dict(),
                            f"a Timer of e_layers {len(self.layers)} and {len(self.heads)} output heads")

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        return per_series(lambda series: self.forecast(series)[..., None], x, 1)

    def forecast(self, series: torch.Tensor) -> torch.Tensor:
        """generate(series, max_new_tokens=output_token_len) on a batch of series (series, time)."""
        h, mean, std = self._tokens(series[:, series.shape[1] % self.patch_len:])
        forecasts, remaining = [], self.out_len
        while True:
            head = self.heads[self._head_for(remaining)]
            forecast = head(self._last_state(h))[:, :remaining] * std + mean
            forecasts.append(forecast)
            remaining -= forecast.shape[1]
            if remaining <= 0:
                return torch.cat(forecasts, dim=1)
            new, mean, std = self._tokens(forecast)
            h = torch.cat([h, new], dim=1)

    def _tokens(self, points: torch.Tensor) -> tuple:
        """Embedded patches of points (series, time) scaled by their mean and standard deviation, and those."""
        mean, std = points.mean(-1, keepdim=True), points.std(-1, keepdim=True)
        std = torch.where(std > 0, std, torch.ones_like(std))  # 0 or NaN (one point): generate's NaN, here 1
        return self.embedding(((points - mean) / std).unfold(-1, self.patch_len, self.patch_len)), mean, std

    def _last_state(self, h: torch.Tensor) -> torch.Tensor:
        rotary = rotary_tables(torch.arange(h.shape[1], device=h.device), self.head_dim)
        for layer in self.layers:
            h = layer(h, rotary)
        return self.norm(h[:, -1])

    def _head_for(self, remaining: int) -> int:
        """generate's choice: the longest head within the points still to forecast, the first if none is."""
        chosen = 0
        for i, length in enumerate(self.head_lens[1:], start=1):
            if length > remaining:
                break
            chosen = i
        return chosen


def head_lengths(text: str, patch_len: int) -> tuple:
    """output_heads as increasing lengths, each a multiple of patch_len (the rollout appends whole patches)."""
    try:
        found = tuple(int(n) for n in str(text).split(","))
    except ValueError:
        raise ValueError(f"output_heads must be comma-separated integers, got {text!r}") from None
    if not all(n > 0 and n % patch_len == 0 for n in found) or list(found) != sorted(set(found)):
        raise ValueError(f"output_heads must increase, each a positive multiple of patch_len {patch_len}: the "
                         f"forecast appends whole patches; got {text!r}")
    return found


def thuml_config(path: str, model_type: str, what: str, defaults: dict, without_cache: str) -> dict:
    """config.json of a thuml checkpoint (Timer's, Sundial's: the folder or a file in it), absent keys at the
    publisher's configuration's defaults; ValueError naming what is not the published models' (another model_type,
    an activation other than the SwiGLU's silu, use_cache false, whose generate `without_cache` does)."""
    found = read_config(os.path.dirname(path) if os.path.isfile(path) else path, what)
    if found.get("model_type") != model_type:
        raise ValueError(f"expected {what}, found model_type {found.get('model_type')!r} in config.json")
    config = {**defaults, **found}
    if config["hidden_act"] != "silu":
        raise ValueError(f"expected hidden_act silu (the SwiGLU of every published {model_type}), found "
                         f"{config['hidden_act']!r}")
    if not config["use_cache"]:
        raise ValueError(f"expected use_cache true, as the published {model_type} has: with use_cache false its "
                         f"generate {without_cache}")
    return config


def published_names(n_layers: int, n_heads: int) -> dict:
    """This model's state-dict key -> the publisher's keys it holds (several: concatenated, q, k, v fused)."""
    names = {"embedding.weight": ("model.embed_layer.emb.weight",),
             "norm.weight": ("model.norm.weight",), "norm.bias": ("model.norm.bias",)}
    for i in range(n_layers):
        ours, theirs = f"layers.{i}.", f"model.layers.{i}."
        for kind in ("weight", "bias"):
            names[ours + f"attention.qkv.{kind}"] = tuple(theirs + f"self_attn.{p}_proj.{kind}" for p in "qkv")
            for norm in ("norm1", "norm2"):
                names[ours + f"{norm}.{kind}"] = (theirs + f"{norm}.{kind}",)
        names[ours + "attention.out.weight"] = (theirs + "self_attn.o_proj.weight",)
        for part in ("gate", "up", "down"):
            names[ours + f"ffn.{part}.weight"] = (theirs + f"ffn_layer.{part}_proj.weight",)
    for j in range(n_heads):
        names[f"heads.{j}.weight"] = (f"lm_heads.{j}.weight",)
    return names
