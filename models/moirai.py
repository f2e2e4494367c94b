import math
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, Published, d_ff, d_model, dropout, e_layers, hparam, n_heads
from models.layers.dropout import Dropout
from models.layers.outputs import per_series, sample_quantiles
from models.layers.published import (
    context_length_hparam,
    levels,
    load_safetensors,
    mapped_state,
    quantile_levels_hparam,
    quantile_outputs,
    read_config,
)

WHAT = ("a Moirai 2.0 checkpoint (Moirai2Module's config.json with patch_size, num_predict_token and quantile_levels, "
        "and model.safetensors, as Salesforce/moirai-2.0-R-small)")
# what Moirai2Module's constructor requires, and its defaults for what config.json may leave out
REQUIRED = ("d_model", "d_ff", "num_layers", "patch_size", "max_seq_len", "attn_dropout_p", "dropout_p")
CONFIG_DEFAULTS = {"scaling": True, "num_predict_token": 1,
                   "quantile_levels": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]}
HEAD_WIDTH = 64  # the publisher's attention has d_model // 64 heads
ROTARY_BASE = 10000
NORM_EPS = 1e-5  # its RMSNorm's
MIN_VARIANCE = 1e-5  # its scaler: scale = sqrt(variance + 1e-5)


class ResidualMLP(nn.Module):
    """out(silu(hidden(x))) + residual(x): the input embedding of patches and the output head."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int):
        super().__init__()
        self.hidden = nn.Linear(d_in, d_hidden)
        self.out = nn.Linear(d_hidden, d_out)
        self.residual = nn.Linear(d_in, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.silu(self.hidden(x))) + self.residual(x)


def rotary_tables(positions: torch.Tensor, theta: torch.Tensor) -> tuple:
    """cos and sin (S, 2 * len(theta)) of the positions' angles, each frequency repeated for its adjacent pair."""
    angles = positions.to(theta.dtype)[:, None] * theta[None, :]
    return angles.cos().repeat_interleave(2, -1), angles.sin().repeat_interleave(2, -1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of the first cos.shape[-1] features of x (..., S, D), in adjacent pairs (x0, x1) ->
    (x0 cos - x1 sin, x1 cos + x0 sin); the other features pass through."""
    width = cos.shape[-1]
    part, rest = x[..., :width], x[..., width:]
    pairs = part.unflatten(-1, (-1, 2))
    turned = torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)
    return torch.cat([cos * part + sin * turned, rest], dim=-1)


class Attention(nn.Module):
    """Bias-free multi-head attention with RMS-normalised queries and keys (per head), rotary embedding of the first
    half of each head, and a learnt bias per head for pairs of tokens of the same variate (row 1 of variate_bias) or
    of different ones (row 0)."""

    def __init__(self, d: int, heads: int, attn_dropout: float):
        super().__init__()
        self.heads, self.head_dim, self.attn_dropout = heads, d // heads, attn_dropout
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.q_norm = nn.RMSNorm(self.head_dim, eps=NORM_EPS)
        self.k_norm = nn.RMSNorm(self.head_dim, eps=NORM_EPS)
        self.variate_bias = nn.Embedding(2, heads)

    def forward(self, x: torch.Tensor, rotary: tuple, causal: torch.Tensor) -> torch.Tensor:
        B, S, D = x.shape
        q, k, v = self.qkv(x).view(B, S, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = rotate(self.q_norm(q), *rotary), rotate(self.k_norm(k), *rotary)
        # every token of a series is one variate: each head's same-variate bias, where the causal mask allows
        bias = self.variate_bias.weight[1][:, None, None].expand(-1, S, S).masked_fill(~causal, float("-inf"))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1 / math.sqrt(self.head_dim),
                                             dropout_p=self.attn_dropout if self.training else 0.0)
        return self.out(out.transpose(1, 2).reshape(B, S, D))


class GatedFeedForward(nn.Module):
    """down(silu(gate(x)) * up(x)), bias-free, with dropout after the product and after down."""

    def __init__(self, d: int, hidden: int, dropout: float):
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(self.dropout(F.silu(self.gate(x)) * self.up(x))))


class Layer(nn.Module):
    """Pre-norm decoder layer: h + dropout(attention(norm1(h))), then h + ffn(norm2(h))."""

    def __init__(self, d: int, heads: int, hidden: int, dropout: float, attn_dropout: float):
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(d, eps=NORM_EPS), nn.RMSNorm(d, eps=NORM_EPS)
        self.attention = Attention(d, heads, attn_dropout)
        self.ffn = GatedFeedForward(d, hidden, dropout)
        self.dropout = Dropout(dropout)

    def forward(self, h: torch.Tensor, rotary: tuple, causal: torch.Tensor) -> torch.Tensor:
        h = h + self.dropout(self.attention(self.norm1(h), rotary, causal))
        return h + self.ffn(self.norm2(h))


class Model(nn.Module):
    """Moirai 2.0 as Salesforce publishes it (Salesforce/moirai-2.0-R-small: the config.json and model.safetensors of
    uni2ts' Moirai2Module, a PyTorchModelHubMixin): a decoder-only Transformer over patches of a series that forecasts
    quantiles of the next patches from the last one; Moirai2Forecast.predict is the forecast.

    Liu, Aksu, Liu, Liu, Yan, Pham, Savarese, Sahoo, Xiong, Li. "Moirai 2.0: When Less Is More for Time Series
    Forecasting." 2025, https://arxiv.org/abs/2511.11698 - the code: https://github.com/SalesforceAIResearch/uni2ts
    (src/uni2ts/model/moirai2/module.py and forecast.py, the modules of src/uni2ts/module/).

    Network. Every channel is its own series (Moirai2Forecast with target_dim 1, as Time-Series-Library's wrapper calls
    it). The window's last context_length points (all of a shorter window) are padded in front with zeros to whole
    patches of patch_len points; the scaler's mean and standard deviation (n - 1 in the denominator, + 1e-5 under the
    root, in float64) of the observed points, the padding left out, scale every patch, padding included. Each patch
    beside its mask of observed points is embedded by a residual MLP (hidden width d_model, SiLU), then e_layers
    pre-norm layers: RMSNorm, causal attention (n_heads of d_model / n_heads; queries and keys RMS-normalised per head,
    rotary embedding of the first half of each head in adjacent pairs, base 10000, on the patch index; a learnt bias
    per head), a bias-free SwiGLU block of width d_ff; a final RMSNorm. A residual MLP reads the last patch's state as
    predict_tokens x quantile_levels x patch_len values: the quantiles of the next predict_tokens patches, scaled back.

    Forecast: Moirai2Forecast(context_length=min(seq_len, context_length), prediction_length=output_token_len).predict,
    step for step. Within predict_tokens patches one forward gives it. Beyond them each quantile's path is fed back:
    path q appends quantile q of every forecast patch, the scaler's statistics are taken again over the context and
    the fed-back points of that path, and the network runs over the whole sequence; the next predict_tokens patches of
    all paths, quantile_levels x quantile_levels values per point, are reduced to the quantile_levels by empirical
    quantiles (linear between order statistics, as torch.quantile), which become the paths' next patches. The patches
    are cut to output_token_len points. A point loss gets the median (Time-Series-Library's wrapper takes the mean of
    the quantiles); --loss quantile gets every level (its --quantiles must be quantile_levels). In training mode the
    forecast is the same, differentiable through the rollout.

    Deviations, none of which changes a forecast beyond rounding: the publisher's sequence also holds the placeholder
    patches of the forecast still to come (zeros, left out of the scaler's statistics, and unseen by the causal
    attention at the patch read), which are not run here; the norm and head run on the last patch alone. Every token of
    a series is one variate, so the variate bias adds each head's same-variate value to all its scores, which the
    softmax ignores here as in the publisher's code (the other-variate row is loaded, unused). The attention's dropout
    applies in training only (the publisher's applies attn_dropout_p in eval mode too; the published one is 0). A
    window is never padded to context_length with its first value, as predict pads a shorter series: every window has
    seq_len points, and min(seq_len, context_length) is the publisher's context. Missing values are not imputed
    (windows have none). max_seq_len is read by neither (the publisher's rotary tables grow with the sequence), so no
    context is refused.

    Defaults are moirai-2.0-R-small's configuration (11.4M parameters) and the context of 1680 points of uni2ts'
    README example.
    """
    capabilities = Capabilities(direct=True, covariate=False, multi_output=True)
    head_modules = ("head",)

    @dataclass
    class Config:
        d_model: int = d_model(384)
        n_heads: int = n_heads(6)
        e_layers: int = e_layers(6)
        d_ff: int = d_ff(1024)
        dropout: float = dropout(0.0)
        attn_dropout: float = hparam(0.0, "dropout probability on the attention weights, in training (the "
                                          "publisher's attn_dropout_p)", tiny=0.0, low=0.0, high=1.0)
        patch_len: int = hparam(16, "points per input patch (and the stride between patches)", tiny=4, low=1)
        predict_tokens: int = hparam(4, "patches one forward forecasts (the publisher's num_predict_token): a longer "
                                        "forecast feeds the quantiles back, as the model's docstring says", tiny=1,
                                     low=1)
        context_length: int = context_length_hparam(1680, tiny=32)
        quantile_levels: str = quantile_levels_hparam()

    def __init__(self, configs):
        super().__init__()
        quantiles, self.median = quantile_outputs(configs)
        head_dim = configs.d_model // configs.n_heads
        if configs.d_model % configs.n_heads or head_dim % 4:
            raise ValueError(f"Moirai needs d_model {configs.d_model} divisible by n_heads {configs.n_heads} and a "
                             "head size that is a multiple of 4 (rotary embedding of half of each head, in pairs)")
        self.patch_len, self.predict_tokens = configs.patch_len, configs.predict_tokens
        self.context_length, self.out_len = configs.context_length, configs.output_token_len
        self.n_outputs = configs.n_outputs
        self.architecture = {"d_model": configs.d_model, "n_heads": configs.n_heads, "e_layers": configs.e_layers,
                             "d_ff": configs.d_ff, "patch_len": self.patch_len, "predict_tokens": self.predict_tokens,
                             "quantile_levels": ",".join(map(str, quantiles))}
        self.register_buffer("levels", torch.tensor(quantiles), persistent=False)
        width = head_dim // 2  # the rotated features; on the CPU, as the publisher computes them, then moved
        self.register_buffer("theta", 1.0 / torch.pow(ROTARY_BASE, torch.arange(0, width, 2, dtype=torch.float32,
                                                                                device="cpu") / width),
                             persistent=False)
        self.embedding = ResidualMLP(2 * self.patch_len, configs.d_model, configs.d_model)
        self.layers = nn.ModuleList(Layer(configs.d_model, configs.n_heads, configs.d_ff, configs.dropout,
                                          configs.attn_dropout) for _ in range(configs.e_layers))
        self.norm = nn.RMSNorm(configs.d_model, eps=NORM_EPS)
        self.head = ResidualMLP(configs.d_model, configs.d_model,
                                self.predict_tokens * len(quantiles) * self.patch_len)

    @staticmethod
    def published(path: str) -> Published:
        found = read_config(os.path.dirname(path) if os.path.isfile(path) else path, WHAT)
        if "patch_sizes" in found or "distr_output" in found:
            raise ValueError(f"expected {WHAT}, found a Moirai 1.x or Moirai-MoE checkpoint (patch_sizes, "
                             "distr_output in config.json)")
        if "patch_size" not in found or "num_layers" not in found:
            what = f"model_type {found['model_type']!r}" if "model_type" in found else \
                f"a config.json of {', '.join(sorted(found)[:6]) or 'nothing'}"
            raise ValueError(f"expected {WHAT}, found {what}")
        missing = [key for key in REQUIRED if key not in found]
        if missing:
            raise ValueError(f"expected {WHAT} with {', '.join(missing)} in config.json, found none")
        config = {**CONFIG_DEFAULTS, **found}
        if not config["scaling"]:
            raise ValueError("expected scaling true (each window scaled by its mean and standard deviation, as every "
                             "published Moirai 2.0 has), found false")
        if config["d_model"] < HEAD_WIDTH:
            raise ValueError(f"expected d_model of at least {HEAD_WIDTH} (the publisher's attention has d_model // "
                             f"{HEAD_WIDTH} heads), found {config['d_model']}")
        quantiles = levels(",".join(str(q) for q in config["quantile_levels"]))
        # Moirai2Module's gated feed-forward block without d_ff: 2/3 of 4 d_model, rounded up to a multiple of 8
        hidden = config["d_ff"] or (int(4 * config["d_model"] * 2 / 3) + 7) // 8 * 8
        hparams = {"d_model": config["d_model"], "n_heads": config["d_model"] // HEAD_WIDTH,
                   "e_layers": config["num_layers"], "d_ff": hidden, "patch_len": config["patch_size"],
                   "predict_tokens": config["num_predict_token"], "quantile_levels": ",".join(map(str, quantiles))}
        return Published(hparams, defaults={"dropout": config["dropout_p"], "attn_dropout": config["attn_dropout_p"]})

    def load_published(self, path: str) -> None:
        load_safetensors(self, path, WHAT)

    def from_published(self, weights: dict) -> dict:
        """This model's state dict from the publisher's (Moirai2Module's keys); ValueError naming the keys missing,
        unexpected or of another shape."""
        return mapped_state(weights, published_names(len(self.layers)), self.state_dict(),
                            f"a Moirai 2.0 of e_layers {len(self.layers)}")

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        return per_series(self._values, x, self.n_outputs)

    def _values(self, series: torch.Tensor) -> torch.Tensor:
        """(series, output_token_len, k): every quantile, or the median alone."""
        quantiles = self.forecast(series).transpose(1, 2)
        return quantiles if self.n_outputs > 1 else quantiles[..., self.median:self.median + 1]

    def forecast(self, series: torch.Tensor) -> torch.Tensor:
        """Moirai2Forecast.predict on a batch of series (series, time): quantiles (series, Q, output_token_len)."""
        context = series[:, -self.context_length:]
        pad = -context.shape[1] % self.patch_len
        values = F.pad(context, (pad, 0)).unflatten(-1, (-1, self.patch_len))  # (S, N, P)
        observed = F.pad(torch.ones_like(context), (pad, 0)).unflatten(-1, (-1, self.patch_len))
        patches = -(-self.out_len // self.patch_len)
        first = self.predict(values, observed)  # (S, T, Q, P)
        if patches <= self.predict_tokens:
            return first[:, :patches].transpose(1, 2).flatten(2)[..., :self.out_len]
        S, Q = len(series), len(self.levels)
        values, observed = values[:, None].expand(-1, Q, -1, -1), observed[:, None].expand(-1, Q, -1, -1)
        forecasts, new, remaining = [first], first.transpose(1, 2), patches - self.predict_tokens
        while remaining > 0:
            values = torch.cat([values, new], dim=2)  # path q: quantile q of each patch forecast
            observed = torch.cat([observed, torch.ones_like(new)], dim=2)
            n = min(self.predict_tokens, remaining)
            out = self.predict(values.flatten(0, 1), observed.flatten(0, 1))[:, :n].unflatten(0, (S, Q))
            mixed = out.permute(0, 2, 1, 3, 4).flatten(2, 3).flatten(0, 1)  # (S * n, Q paths x Q quantiles, P)
            reduced = sample_quantiles(mixed, self.levels).unflatten(0, (S, n)).transpose(2, 3)  # (S, n, Q, P)
            forecasts.append(reduced)
            new, remaining = reduced.transpose(1, 2), remaining - n
        return torch.cat(forecasts, dim=1).transpose(1, 2).flatten(2)[..., :self.out_len]

    def predict(self, values: torch.Tensor, observed: torch.Tensor) -> torch.Tensor:
        """The quantiles (B, predict_tokens, Q, patch_len) of the patches after patches `values` (B, N, patch_len)
        whose points `observed` (1, 0 for padding) marks, on the scale of values."""
        loc, scale = self.statistics(values, observed)
        h = self.embedding(torch.cat([(values - loc) / scale, observed], dim=-1))
        n = h.shape[1]
        positions = torch.arange(n, device=h.device)
        rotary = rotary_tables(positions, self.theta)
        causal = positions[None, :] <= positions[:, None]
        for layer in self.layers:
            h = layer(h, rotary, causal)
        out = self.head(self.norm(h[:, -1])) * scale[:, 0] + loc[:, 0]
        return out.unflatten(-1, (self.predict_tokens, len(self.levels), self.patch_len))

    @staticmethod
    def statistics(values: torch.Tensor, observed: torch.Tensor) -> tuple:
        """The scaler's mean and standard deviation (B, 1, 1) of the observed points, in float64 as the publisher's
        (n - 1 in the denominator, 1 where n is 1; + 1e-5 under the root)."""
        x, mask = values.double(), observed.double()
        n = mask.sum((-2, -1), keepdim=True)
        loc = (x * mask).sum((-2, -1), keepdim=True) / n
        variance = ((x - loc) ** 2 * mask).sum((-2, -1), keepdim=True) / (n - 1).clamp(min=1)
        return loc.float(), torch.sqrt(variance + MIN_VARIANCE).float()


def published_names(n_layers: int) -> dict:
    """This model's state-dict key -> the publisher's keys it holds (several: concatenated, q, k, v fused)."""
    names = {"norm.weight": ("encoder.norm.weight",)}
    for ours, theirs in (("embedding", "in_proj"), ("head", "out_proj")):
        for part, official in (("hidden", "hidden_layer"), ("out", "output_layer"), ("residual", "residual_layer")):
            for kind in ("weight", "bias"):
                names[f"{ours}.{part}.{kind}"] = (f"{theirs}.{official}.{kind}",)
    for i in range(n_layers):
        ours, theirs = f"layers.{i}.", f"encoder.layers.{i}."
        names[ours + "attention.qkv.weight"] = tuple(theirs + f"self_attn.{p}_proj.weight" for p in "qkv")
        parts = {"norm1": "norm1", "norm2": "norm2", "attention.out": "self_attn.out_proj",
                 "attention.q_norm": "self_attn.q_norm", "attention.k_norm": "self_attn.k_norm",
                 "attention.variate_bias": "self_attn.var_attn_bias.emb", "ffn.gate": "ffn.fc_gate",
                 "ffn.up": "ffn.fc1", "ffn.down": "ffn.fc2"}
        for mine, official in parts.items():
            names[f"{ours}{mine}.weight"] = (f"{theirs}{official}.weight",)
    return names
