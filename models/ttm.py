import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, Published, d_model, dropout, e_layers, hparam, use_norm
from models.layers.dropout import Dropout
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points
from models.layers.published import mapped_state, package, read_config

WHAT = "a TinyTimeMixer checkpoint (model_type tinytimemixer, as ibm-granite/granite-timeseries-ttm-r2)"
# config.json key -> (the value this model computes with, why), each at granite-tsfm's TinyTimeMixerConfig default
# where the file leaves it out: the published TTMs' (r1, r2, r2.1) architecture
FIXED = {"patch_last": (True, "patches along time"),
         "mode": ("common_channel", "a backbone that keeps channels apart"),
         "gated_attn": (True, "softmax-gated mixer blocks"),
         "gate_mode": ("softmax", "softmax-gated mixer blocks"),
         "use_register_context_gating": (False, "gates that read their block's input alone"),
         "norm_mlp": ("LayerNorm", "LayerNorm before each mixer block"),
         "norm_eps": (1e-5, "LayerNorm's epsilon"),
         "self_attn": (False, "mixer blocks without attention"),
         "use_positional_encoding": (False, "no positional encoding"),
         "decoder_adaptive_patching_levels": (0, "a decoder of plain mixer layers"),
         "decoder_raw_residual": (False, "a decoder that reads the backbone alone"),
         "enable_forecast_channel_mixing": (False, "the head's forecast as it is"),
         "prediction_channel_indices": (None, "every channel forecast"),
         "exogenous_channel_indices": (None, "no exogenous channel"),
         "categorical_vocab_size_list": (None, "no static categorical input"),
         "prediction_filter_length": (None, "the head's whole horizon (--output_token_len takes its first points)"),
         "multi_scale": (False, "patches of one scale"),
         "register_tokens": (0, "no register tokens"),
         "fft_length": (0, "no spectral patches"),
         "enable_base_norm_always": (False, "no norm of the embedded patches"),
         "multi_quantile_head": (False, "a point head"),
         "decompose": (False, "no trend decomposition")}
# what TinyTimeMixerConfig assumes for the keys read below where config.json leaves them out
DEFAULTS = {"context_length": 64, "patch_length": 8, "patch_stride": 8, "prediction_length": 16, "d_model": 16,
            "expansion_factor": 2, "num_layers": 3, "dropout": 0.2, "head_dropout": 0.2, "scaling": "std",
            "adaptive_patching_levels": 0, "resolution_prefix_tuning": False, "frequency_token_vocab_size": 5,
            "decoder_num_layers": 8, "decoder_d_model": 8, "decoder_mode": "common_channel", "use_decoder": True,
            "num_input_channels": 1, "loss": "mse"}
NARROWEST = 4  # granite-tsfm runs an adaptive-patching level unsplit where its patches would have 4 features or fewer
# our mixer block (by the axis it mixes) -> granite-tsfm's
BLOCKS = {-3: "channel_feature_mixer", -2: "patch_mixer", -1: "feature_mixer"}


class AxisLinear(nn.Module):
    """A linear map along one axis of (B, C, N, D): features (-1), patches (-2) or channels (-3).

    One GEMM whatever the axis: einsum lays the other axes out as the rows of a single matrix,
    where a left multiplication would run B*C tiny batched GEMMs.
    """

    def __init__(self, size_in: int, size_out: int, axis: int):
        super().__init__()
        self.axis = axis
        layer = nn.Linear(size_in, size_out)  # nn.Linear's initialisation
        self.weight, self.bias = layer.weight, layer.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.axis == -1:
            return F.linear(x, self.weight, self.bias)
        if self.axis == -2:
            return torch.einsum("bcnd,hn->bchd", x, self.weight) + self.bias[:, None]
        return torch.einsum("bcnd,hc->bhnd", x, self.weight) + self.bias[:, None, None]


class GatedMLP(nn.Module):
    """LayerNorm, then an MLP along one axis with a softmax gate, plus the residual (TSMixer block). The gate weighs
    the MLP's output, or with gate_input its input (granite-tsfm's channel mixer)."""

    def __init__(self, d_model: int, size: int, axis: int, expansion: int, dropout: float, gate_input: bool = False):
        super().__init__()
        self.axis = axis  # -1 features, -2 patches, -3 channels of (B, C, N, D)
        self.gate_input = gate_input
        self.norm = nn.LayerNorm(d_model)
        self.fc1 = AxisLinear(size, size * expansion, axis)
        self.fc2 = AxisLinear(size * expansion, size, axis)
        self.gate = AxisLinear(size, size, axis)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate_input:
            h = self.norm(x)
            h = h * torch.softmax(self.gate(h), dim=self.axis)
            return x + self.dropout(self.fc2(self.dropout(F.gelu(self.fc1(h)))))
        h = self.dropout(self.fc2(self.dropout(F.gelu(self.fc1(self.norm(x))))))
        return x + h * torch.softmax(self.gate(h), dim=self.axis)


class MixerLayer(nn.Module):
    """Optional channel mixing, then patch mixing and feature mixing."""

    def __init__(self, d_model: int, n_patches: int, n_vars: int, mix_channels: bool, expansion: int,
                 dropout: float, gate_channel_input: bool = False):
        super().__init__()
        blocks = [GatedMLP(d_model, n_vars, -3, expansion, dropout, gate_channel_input)] if mix_channels else []
        if n_patches > 1:
            blocks.append(GatedMLP(d_model, n_patches, -2, expansion, dropout))
        blocks.append(GatedMLP(d_model, d_model, -1, expansion, dropout))
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class AdaptivePatchLevel(nn.Module):
    """Mixer layers on patches re-split by `factor`: N*factor patches of D/factor features each."""

    def __init__(self, factor: int, n_layers: int, d_model: int, n_patches: int, n_vars: int, expansion: int,
                 dropout: float):
        super().__init__()
        self.factor = factor
        self.layers = nn.Sequential(*(MixerLayer(d_model // factor, n_patches * factor, n_vars, False, expansion,
                                                 dropout) for _ in range(n_layers)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, N, D = x.shape
        return self.layers(x.reshape(B, C, N * self.factor, D // self.factor)).reshape(B, C, N, D)


class ResolutionPrefix(nn.Module):
    """Resolution prefix tuning: the data's frequency token, embedded in patch_len values and mapped by a GELU MLP
    (of width (patch_len + d_model) // 2) to one more patch embedding, put before the window's patches."""

    def __init__(self, vocabulary: int, token: int, patch_len: int, d_model: int):
        super().__init__()
        self.token = token
        self.embedding = nn.Embedding(vocabulary, patch_len)
        self.fc1 = nn.Linear(patch_len, (patch_len + d_model) // 2)
        self.fc2 = nn.Linear((patch_len + d_model) // 2, d_model)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        """patches (B, C, N, D) -> (B, C, N + 1, D)."""
        B, C, _, D = patches.shape
        prefix = self.fc2(F.gelu(self.fc1(self.embedding.weight[self.token])))
        return torch.cat([prefix.expand(B, C, 1, D), patches], dim=2)


class Model(nn.Module):
    """TTM (Tiny Time Mixers): a small MLP-Mixer with adaptive patching, trained from scratch here or loaded from
    IBM's published TinyTimeMixer weights.

    Ekambaram, Jati, Dayama, Mukherjee, Nguyen, Gifford, Reddy, Kalagnanam. "Tiny Time Mixers (TTMs):
    Fast Pre-trained Models for Enhanced Zero/Few-Shot Forecasting of Multivariate Time Series."
    NeurIPS 2024. https://arxiv.org/abs/2401.03955 - code: https://github.com/ibm-granite/granite-tsfm
    (tsfm_public/models/tinytimemixer/).

    Channel-independent backbone: non-overlapping patches of patch_len (the most recent seq_len
    points that fill whole patches), projected to d_model, through ap_levels levels of e_layers
    gated mixer layers; level i works on patches re-split by 2^i (coarse to fine, adaptive patching).
    A smaller decoder (d_layers layers of decoder_d_model) mixes channels as well when
    decoder_mode is mix_channel, which is how covariates inform the target; a flatten-linear head
    gives the forecast.

    Published checkpoints (--pretrained: a folder of granite-tsfm's TinyTimeMixerForPrediction, config.json and
    model.safetensors, such as a branch of ibm-granite/granite-timeseries-ttm-r2: 512-96, 1024-96, 1536-96, ...)
    set the architecture from config.json (published()), and the model forecasts as TinyTimeMixerForPrediction
    does zero-shot: the window cut to its last context_length points, or zero-padded in front to them (granite-tsfm
    0.3.11's forward: the padded zeros count in the scaling, as without a past_observed_mask), standardised by
    its mean and standard deviation (its "std" scaling, use_norm here), patched, with the resolution prefix
    (--frequency_token: granite-tsfm's index of the data's frequency) when the checkpoint has one; the backbone, the
    decoder (the adapter only where the widths differ; granite-tsfm's channel mixer gates its input) and the head
    of `horizon` points (prediction_length), whose first output_token_len points are the forecast
    (prediction_filter_length's cut). A longer output_token_len is rolled out as granite-tsfm's RecursivePredictor
    does: each forecast of `horizon` points appended, the next read from the last seq_len points. granite-tsfm's
    decoder runs with head_dropout (decoder_dropout here); its adaptive-patching level whose patches would have 4
    features or fewer runs unsplit (ap_min_width). Every channel is a series of its own, except through a decoder that
    mixes channels (decoder_mode mix_channel), whose checkpoint fixes their number (num_input_channels).
    """
    capabilities = Capabilities(direct=True, covariate=True, multi_output=True)
    head_modules = ("head",)

    @dataclass
    class Config:
        patch_len: int = hparam(16, "points per patch", tiny=8, low=1)
        d_model: int = d_model()
        e_layers: int = e_layers()
        ap_levels: int = hparam(3, "adaptive-patching levels of the backbone", tiny=2, low=0)
        d_layers: int = hparam(2, "decoder mixer layers", tiny=1, low=0)
        decoder_d_model: int | None = hparam(None, "decoder width (default: d_model)", low=1)
        decoder_mode: str = hparam("mix_channel", "whether the decoder mixes channels (needed for covariates)",
                                   choices=("mix_channel", "common_channel"))
        dropout: float = dropout()
        head_dropout: float = hparam(0.0, "dropout before the forecast head", low=0.0, high=1.0)
        use_norm: bool = use_norm()
        ap_min_width: int = hparam(0, "an adaptive-patching level whose patches would have this many features or "
                                      "fewer runs unsplit (granite-tsfm's: 4)", low=0, later=True)
        expansion: int = hparam(2, "hidden width of each mixer MLP, a multiple of its input's", low=1, later=True)
        decoder_dropout: float | None = hparam(None, "dropout of the decoder's mixer layers (default: dropout; "
                                                     "granite-tsfm's is head_dropout)", low=0.0, high=1.0, later=True)
        decoder_adapter: bool = hparam(True, "a linear map from d_model to the decoder's width before the decoder "
                                             "(granite-tsfm's only where the widths differ)", later=True)
        channel_gate: str = hparam("output", "what the decoder's channel mixer gates: its MLP's output, or its input "
                                             "(granite-tsfm's)", choices=("output", "input"), later=True)
        context_length: int | None = hparam(None, "the points of context a forecast reads: a longer window is cut to "
                                                  "its last ones, a shorter one zero-padded in front (default: "
                                                  "seq_len)", low=1, later=True)
        horizon: int | None = hparam(None, "points the head forecasts: the first output_token_len are the forecast, "
                                           "a longer one is rolled out (default: output_token_len)", low=1, later=True)
        resolution_prefix: int = hparam(0, "resolution prefix tuning: a patch for the data's frequency before the "
                                           "window's, learned for this many frequencies (0: none)", low=0, later=True)
        frequency_token: int | None = hparam(None, "the data's frequency for resolution_prefix, granite-tsfm's index: "
                                                   "1 min, 2 2min, 3 5min, 4 10min, 5 15min, 6 30min, 7 h, 8 D, 9 W, "
                                                   "0 another", low=0, later=True)

    def __init__(self, configs):
        super().__init__()
        P, D = configs.patch_len, configs.d_model
        self.context = configs.context_length or configs.seq_len
        if P > self.context:
            raise ValueError(f"patch_len {P} is longer than the context ({self.context} points)")
        factors = [2 ** level for level in reversed(range(configs.ap_levels))]  # each level's split, coarse to fine
        if configs.ap_min_width:  # granite-tsfm's: a level whose patches would be that narrow stays unsplit
            factors = [factor if D // factor > configs.ap_min_width else 1 for factor in factors]
        if factors and D % max(factors):
            raise ValueError(f"d_model {D} must be divisible by every adaptive-patching split, up to {max(factors)}")
        d_dec = configs.decoder_d_model or D
        if not configs.decoder_adapter and d_dec != D:
            raise ValueError(f"without decoder_adapter the decoder reads the backbone as it is: decoder_d_model "
                             f"{d_dec} must be d_model {D}")
        self.patch_len, self.use_norm, self.n_outputs = P, configs.use_norm, configs.n_outputs
        self.out_len, self.horizon = configs.output_token_len, configs.horizon or configs.output_token_len
        if self.out_len > self.horizon and self.n_outputs != 1:
            raise ValueError(f"output_token_len {self.out_len} beyond horizon {self.horizon} is rolled out, feeding "
                             f"points back: a point loss, not {self.n_outputs} values per point")
        if configs.resolution_prefix and configs.frequency_token is None:
            raise ValueError("the resolution prefix needs the data's frequency: give --frequency_token (granite-tsfm's "
                             "index: 1 min, 2 2min, 3 5min, 4 10min, 5 15min, 6 30min, 7 h, 8 D, 9 W, 0 another)")
        if configs.resolution_prefix and not configs.frequency_token < configs.resolution_prefix:
            raise ValueError(f"frequency_token {configs.frequency_token} is not among the resolution prefix's "
                             f"{configs.resolution_prefix} frequencies")
        self.n_patches = self.context // P
        tokens = self.n_patches + (1 if configs.resolution_prefix else 0)  # what the mixers and the head see
        decoder_dropout = configs.dropout if configs.decoder_dropout is None else configs.decoder_dropout
        self.patcher = nn.Linear(P, D)
        # ModuleLists (keys as Sequential's): the levels and the decoder layers are the blocks --fsdp shards
        self.backbone = nn.ModuleList(
            AdaptivePatchLevel(factor, configs.e_layers, D, tokens, configs.enc_in, configs.expansion, configs.dropout)
            for factor in factors)
        self.adapter = nn.Linear(D, d_dec) if configs.decoder_adapter else nn.Identity()
        self.decoder = nn.ModuleList(
            MixerLayer(d_dec, tokens, configs.enc_in, configs.decoder_mode == "mix_channel", configs.expansion,
                       decoder_dropout, configs.channel_gate == "input") for _ in range(configs.d_layers))
        self.head = nn.Sequential(nn.Flatten(start_dim=-2), Dropout(configs.head_dropout),
                                  nn.Linear(tokens * d_dec, self.horizon * self.n_outputs))
        self.prefix = ResolutionPrefix(configs.resolution_prefix, configs.frequency_token, P, D) \
            if configs.resolution_prefix else None
        self.architecture = {name: getattr(configs, name) for name in (
            "patch_len", "d_model", "e_layers", "ap_levels", "ap_min_width", "d_layers", "decoder_d_model",
            "decoder_mode", "use_norm", "expansion", "decoder_adapter", "channel_gate", "context_length", "horizon",
            "resolution_prefix")}
        self.architecture["decoder_d_model"] = d_dec
        self.enc_in = configs.enc_in

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.out_len <= self.horizon:
            return self._forecast(x)[:, :self.out_len]
        # beyond one forward: RecursivePredictor's rollout, each step reading the last seq_len points
        steps, sequence = [], x
        for _ in range(-(-self.out_len // self.horizon)):
            steps.append(self._forecast(sequence[:, -x.shape[1]:]))
            sequence = torch.cat([sequence, steps[-1]], dim=1)
        return torch.cat(steps, dim=1)[:, :self.out_len]

    def _forecast(self, x: torch.Tensor) -> torch.Tensor:
        """One forward: the head's horizon points after x (B, L, C): (B, horizon, C[, k])."""
        if x.shape[1] > self.context:
            x = x[:, -self.context:]
        elif x.shape[1] < self.context:
            x = torch.cat([x.new_zeros(x.shape[0], self.context - x.shape[1], x.shape[2]), x], dim=1)
        if self.use_norm:
            x, stats = normalize(x)
        recent = x[:, x.shape[1] - self.n_patches * self.patch_len:]
        patches = recent.transpose(1, 2).unfold(-1, self.patch_len, self.patch_len)  # (B, C, N, P)
        h = self.patcher(patches)
        if self.prefix is not None:
            h = self.prefix(h)
        for level in self.backbone:
            h = level(h)
        h = self.adapter(h)
        for layer in self.decoder:
            h = layer(h)
        out = channels_last(split_points(self.head(h), self.n_outputs))
        return denormalize(out, stats) if self.use_norm else out

    @staticmethod
    def published(path: str) -> Published:
        """The architecture in config.json of a folder saved by granite-tsfm's TinyTimeMixerForPrediction (or of the
        folder of a file in it)."""
        found = read_config(os.path.dirname(path) if os.path.isfile(path) else path, WHAT)
        if found.get("model_type") != "tinytimemixer":
            raise ValueError(f"expected {WHAT}, found model_type {found.get('model_type')!r} in config.json")
        architectures = found.get("architectures") or ["TinyTimeMixerForPrediction"]
        if "TinyTimeMixerForPrediction" not in architectures:
            raise ValueError(f"expected {WHAT} of TinyTimeMixerForPrediction, found {', '.join(architectures)}")
        for key, (value, why) in FIXED.items():
            if found.get(key, value) != value:
                raise ValueError(f"expected {key} {value} in config.json ({why}, as every published TTM has), found "
                                 f"{found[key]}")
        c = {**DEFAULTS, **found}
        context, P, D, levels = c["context_length"], c["patch_length"], c["d_model"], c["adaptive_patching_levels"]
        if c["patch_stride"] != P:
            raise ValueError(f"expected patches that do not overlap (patch_stride = patch_length {P}), found "
                             f"patch_stride {c['patch_stride']}")
        if not 0 < P < context:
            raise ValueError(f"expected a patch_length within context_length {context}, found {P}")
        prefix = c["frequency_token_vocab_size"] if c["resolution_prefix_tuning"] else 0
        if found.get("num_patches", context // P + bool(prefix)) != context // P + bool(prefix):
            raise ValueError(f"expected num_patches {context // P + bool(prefix)} (context_length {context} in patches "
                             f"of {P}{' and the resolution prefix' if prefix else ''}), found {found['num_patches']}")
        scaling = c["scaling"]
        if scaling not in ("std", True, None, False):
            raise ValueError(f"expected scaling std or none (the window's own standardisation), found {scaling!r}")
        if c["loss"] == "nll":
            raise ValueError("expected a point head (loss mse, mae, huber or pinball), found loss nll: a distribution "
                             "head")
        decoder = c["use_decoder"]
        hparams = {"patch_len": P, "d_model": D, "e_layers": c["num_layers"], "ap_levels": max(levels, 1),
                   "ap_min_width": NARROWEST,
                   "d_layers": c["decoder_num_layers"] if decoder else 0,
                   "decoder_d_model": c["decoder_d_model"] if decoder else D,
                   "decoder_mode": c["decoder_mode"] if decoder else "common_channel",
                   "use_norm": scaling in ("std", True), "expansion": c["expansion_factor"],
                   "decoder_adapter": decoder and c["decoder_d_model"] != D,
                   "channel_gate": "input", "context_length": context, "horizon": c["prediction_length"],
                   "resolution_prefix": prefix}
        defaults = {"dropout": c["dropout"], "head_dropout": c["head_dropout"], "decoder_dropout": c["head_dropout"]}
        return Published(hparams, max_seq_len=context, defaults=defaults)

    def load_published(self, path: str) -> None:
        """Every tensor of granite-tsfm's TinyTimeMixerForPrediction state dict (model.safetensors) into this model,
        built from published()."""
        folder = os.path.dirname(path) if os.path.isfile(path) else path
        found = self.published(folder)
        differ = [f"{k} {v} (this model's {self.architecture[k]})" for k, v in found.hparams.items()
                  if v != self.architecture[k]]
        if differ:
            raise ValueError(f"the checkpoint's architecture is not this model's: {', '.join(differ)}")
        config = {**DEFAULTS, **read_config(folder, WHAT)}
        if found.hparams["decoder_mode"] == "mix_channel" and config["num_input_channels"] != self.enc_in:
            raise ValueError(f"the checkpoint's decoder mixes {config['num_input_channels']} channels "
                             f"(num_input_channels), the data has {self.enc_in}")
        if self.n_outputs != 1:
            raise ValueError(f"the checkpoint forecasts one value per point: a point loss, not {self.n_outputs} values "
                             "per point")
        file = os.path.join(folder, "model.safetensors")
        if not os.path.isfile(file):
            raise ValueError(f"expected {WHAT} with its weights in model.safetensors; found no such file in {folder}")
        weights = package("safetensors.torch", "safetensors").load_file(file)
        names = self.published_names(plain=config["adaptive_patching_levels"] == 0)
        self.load_state_dict(mapped_state(weights, names, self.state_dict(), f"a TinyTimeMixer of {self._size()}"),
                             strict=True)

    def published_names(self, plain: bool) -> dict:
        """This model's state-dict key -> granite-tsfm's TinyTimeMixerForPrediction key it holds. plain: the
        checkpoint's backbone is mixer layers without adaptive patching (adaptive_patching_levels 0), ours one
        level of factor 1."""
        names = {"patcher.weight": ("backbone.encoder.patcher.weight",),
                 "patcher.bias": ("backbone.encoder.patcher.bias",),
                 "head.2.weight": ("head.base_forecast_block.weight",),
                 "head.2.bias": ("head.base_forecast_block.bias",)}
        encoder = "backbone.encoder.mlp_mixer_encoder.mixers."
        for level, block in enumerate(self.backbone):
            for j, layer in enumerate(block.layers):
                theirs = f"{encoder}{j}." if plain else f"{encoder}{level}.mixer_layers.{j}."
                names.update(mixer_names(layer, f"backbone.{level}.layers.{j}.", theirs))
        for j, layer in enumerate(self.decoder):
            names.update(mixer_names(layer, f"decoder.{j}.", f"decoder.decoder_block.mixers.{j}."))
        if isinstance(self.adapter, nn.Linear):
            names.update({f"adapter.{kind}": (f"decoder.adapter.{kind}",) for kind in ("weight", "bias")})
        if self.prefix is not None:
            names["prefix.embedding.weight"] = ("backbone.encoder.freq_mod.0.weight",)
            for ours, theirs in (("fc1", "1"), ("fc2", "3")):
                names.update({f"prefix.{ours}.{kind}": (f"backbone.encoder.freq_mod.{theirs}.{kind}",)
                              for kind in ("weight", "bias")})
        return names

    def _size(self) -> str:
        a = self.architecture
        return (f"ap_levels {a['ap_levels']} of e_layers {a['e_layers']}, d_layers {a['d_layers']}"
                f"{', decoder_mode mix_channel' if a['decoder_mode'] == 'mix_channel' else ''}"
                f"{', a resolution prefix' if self.prefix is not None else ''}")


def mixer_names(layer: MixerLayer, ours: str, theirs: str) -> dict:
    """Our mixer layer's keys (prefix `ours`) -> granite-tsfm's TinyTimeMixerLayer keys (prefix `theirs`)."""
    names = {}
    for b, block in enumerate(layer.blocks):
        mine, official = f"{ours}blocks.{b}.", f"{theirs}{BLOCKS[block.axis]}."
        for kind in ("weight", "bias"):
            names.update({f"{mine}norm.{kind}": (f"{official}norm.norm.{kind}",),
                          f"{mine}fc1.{kind}": (f"{official}mlp.fc1.{kind}",),
                          f"{mine}fc2.{kind}": (f"{official}mlp.fc2.{kind}",),
                          f"{mine}gate.{kind}": (f"{official}gating_block.attn_layer.{kind}",)})
    return names
