"""TTM read from a checkpoint in granite-tsfm's published layout (ibm-granite/granite-timeseries-ttm-r2: config.json
and model.safetensors of TinyTimeMixerForPrediction) forecasts what TinyTimeMixerForPrediction does zero-shot.

granite-tsfm pins a torch older than ours: scripts/equivalence/ttm.py compares with its code in an environment of its
own. Here the reference is its forward written out by hand on the checkpoint's own tensors: the std scaling, the
patches, the resolution prefix, the adaptive-patching backbone, the decoder, the head and prediction_filter_length's
cut, and RecursivePredictor's rollout beyond the head."""
import json

import pytest
import torch
import torch.nn.functional as F

import models
from exp.config import parse_args, resolve
from tests.published import assert_training_forecasts_alike_with_gradients, load
from utils.errors import ConfigError

safetensors = pytest.importorskip("safetensors.torch")

# a tiny checkpoint in the r2 branches' layout (config.json as TinyTimeMixerConfig writes it): patches of 8 over 48
# points, 3 levels of adaptive patching of 2 layers of width 32, a decoder of 2 layers of width 16 that keeps channels
# apart, a head of 24 points
CONFIG = {"architectures": ["TinyTimeMixerForPrediction"], "model_type": "tinytimemixer", "context_length": 48,
          "patch_length": 8, "patch_stride": 8, "num_patches": 6, "prediction_length": 24, "d_model": 32,
          "num_layers": 2, "expansion_factor": 2, "adaptive_patching_levels": 3, "mode": "common_channel",
          "gated_attn": True, "norm_mlp": "LayerNorm", "norm_eps": 1e-05, "self_attn": False, "self_attn_heads": 1,
          "use_positional_encoding": False, "positional_encoding_type": "sincos", "scaling": "std", "loss": "mse",
          "dropout": 0.4, "head_dropout": 0.4, "use_decoder": True, "decoder_num_layers": 2, "decoder_d_model": 16,
          "decoder_adaptive_patching_levels": 0, "decoder_raw_residual": False, "decoder_mode": "common_channel",
          "resolution_prefix_tuning": False, "frequency_token_vocab_size": 5, "num_input_channels": 1,
          "prediction_channel_indices": None, "exogenous_channel_indices": None, "prediction_filter_length": None,
          "enable_forecast_channel_mixing": False, "categorical_vocab_size_list": None, "distribution_output":
          "student_t", "patch_last": True, "init_processing": True, "post_init": False, "init_std": 0.02,
          "torch_dtype": "float32"}
# the r2.1 "ft" branches': a resolution prefix (granite-tsfm's 10 frequencies), one more patch
PREFIX = {**CONFIG, "resolution_prefix_tuning": True, "frequency_token_vocab_size": 10, "num_patches": 7}
# a fine-tuned layout: no adaptive patching, the decoder as wide as the backbone (no adapter) and mixing 3 channels
MIXING = {**CONFIG, "adaptive_patching_levels": 0, "d_model": 16, "expansion_factor": 3, "decoder_mode": "mix_channel",
          "num_input_channels": 3}
# the finest of 3 levels too narrow to split (16 / 4 features), and no scaling
NARROW = {**CONFIG, "d_model": 16, "decoder_d_model": 8, "scaling": None}
HOURLY = 7  # granite-tsfm's frequency token of "h"


def split(d_model, level):
    """An adaptive-patching level's split: 2^level, or none where its patches would have 4 features or fewer."""
    return 2 ** level if d_model // 2 ** level > 4 else 1


def published_layout(config) -> dict:
    """granite-tsfm's TinyTimeMixerForPrediction state dict: every key and its shape."""
    P, D, D_dec, C = config["patch_length"], config["d_model"], config["decoder_d_model"], config["num_input_channels"]
    N, e = config["num_patches"], config["expansion_factor"]
    shapes = {"backbone.encoder.patcher.weight": (D, P), "backbone.encoder.patcher.bias": (D,)}

    def layer(prefix, width, patches, mix):
        sizes = {"patch_mixer": patches, "feature_mixer": width} | ({"channel_feature_mixer": C} if mix else {})
        for block, size in sizes.items():
            p = f"{prefix}{block}."
            shapes.update({p + "norm.norm.weight": (width,), p + "norm.norm.bias": (width,),
                           p + "mlp.fc1.weight": (size * e, size), p + "mlp.fc1.bias": (size * e,),
                           p + "mlp.fc2.weight": (size, size * e), p + "mlp.fc2.bias": (size,),
                           p + "gating_block.attn_layer.weight": (size, size),
                           p + "gating_block.attn_layer.bias": (size,)})

    encoder, levels = "backbone.encoder.mlp_mixer_encoder.mixers.", config["adaptive_patching_levels"]
    for i, level in enumerate(reversed(range(levels))):
        f = split(D, level)
        for j in range(config["num_layers"]):
            layer(f"{encoder}{i}.mixer_layers.{j}.", D // f, N * f, False)
    for j in range(config["num_layers"] if levels == 0 else 0):
        layer(f"{encoder}{j}.", D, N, False)
    if config["resolution_prefix_tuning"]:
        mid = (P + D) // 2
        shapes.update({"backbone.encoder.freq_mod.0.weight": (config["frequency_token_vocab_size"], P),
                       "backbone.encoder.freq_mod.1.weight": (mid, P), "backbone.encoder.freq_mod.1.bias": (mid,),
                       "backbone.encoder.freq_mod.3.weight": (D, mid), "backbone.encoder.freq_mod.3.bias": (D,)})
    if D_dec != D:
        shapes.update({"decoder.adapter.weight": (D_dec, D), "decoder.adapter.bias": (D_dec,)})
    for j in range(config["decoder_num_layers"]):
        layer(f"decoder.decoder_block.mixers.{j}.", D_dec, N, config["decoder_mode"] == "mix_channel")
    shapes["head.base_forecast_block.weight"] = (config["prediction_length"], N * D_dec)
    shapes["head.base_forecast_block.bias"] = (config["prediction_length"],)
    return shapes


def random_weights(config, seed=0) -> dict:
    """Wide random values (LayerNorm weights around 1), so that every tensor moves the forecast; the head's of the
    scale of its inputs, so that a forecast fed back stays of the window's scale."""
    generator = torch.Generator().manual_seed(seed)
    return {key: torch.randn(shape, generator=generator) * (0.1 if key.endswith("bias") else 0.3)
            * (shape[1] ** -0.5 / 0.3 if key == "head.base_forecast_block.weight" else 1.0)
            + (1.0 if ".norm." in key and key.endswith("weight") else 0.0)
            for key, shape in published_layout(config).items()}


def write_checkpoint(folder, config=CONFIG, weights=None):
    """A TinyTimeMixerForPrediction folder as save_pretrained writes it (config.json, model.safetensors)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    safetensors.save_file(weights if weights is not None else random_weights(config), str(folder / "model.safetensors"))
    return folder


def mixer(w, prefix, h, config, mix):
    """TinyTimeMixerLayer on h (B, C, N, D): channel mixing (its gate weighs the MLP's input), then patches, then
    features (their gates weigh the MLP's output), each LayerNorm first and residual."""
    def block(name, h, axis):
        p = f"{prefix}{name}."
        x = F.layer_norm(h, h.shape[-1:], w[p + "norm.norm.weight"], w[p + "norm.norm.bias"]).movedim(axis, -1)
        gate = lambda v: v * torch.softmax(F.linear(v, w[p + "gating_block.attn_layer.weight"],  # noqa: E731
                                                    w[p + "gating_block.attn_layer.bias"]), dim=-1)
        mlp = lambda v: F.linear(F.gelu(F.linear(v, w[p + "mlp.fc1.weight"], w[p + "mlp.fc1.bias"])),  # noqa: E731
                                 w[p + "mlp.fc2.weight"], w[p + "mlp.fc2.bias"])
        return h + (mlp(gate(x)) if name == "channel_feature_mixer" else gate(mlp(x))).movedim(-1, axis)

    if mix:
        h = block("channel_feature_mixer", h, 1)
    if h.shape[2] > 1:
        h = block("patch_mixer", h, 2)
    return block("feature_mixer", h, 3)


def reference_forward(w, config, x, freq_token=None):
    """TinyTimeMixerForPrediction(past_values=x, freq_token=...).prediction_outputs for x (B, L, C): (B, H, C)."""
    L0, P, D = config["context_length"], config["patch_length"], config["d_model"]
    x = x[:, -L0:] if x.shape[1] > L0 else torch.cat([x.new_zeros(x.shape[0], L0 - x.shape[1], x.shape[2]), x], 1)
    loc, scale = torch.zeros(()), torch.ones(())  # scaling None: the window as it is
    if config["scaling"] == "std":
        loc = x.mean(1, keepdim=True)
        scale = torch.sqrt(((x - loc) ** 2).mean(1, keepdim=True) + 1e-5)
    patches = ((x - loc) / scale)[:, L0 % P:].unfold(1, P, P)  # (B, N, C, P) -> (B, C, N, P)
    h = F.linear(patches.transpose(1, 2), w["backbone.encoder.patcher.weight"], w["backbone.encoder.patcher.bias"])
    B, C = h.shape[:2]
    if config["resolution_prefix_tuning"]:
        freq = "backbone.encoder.freq_mod."
        e = w[freq + "0.weight"][torch.full((B,), freq_token)]  # nn.Embedding of each window's token
        e = F.linear(F.gelu(F.linear(e, w[freq + "1.weight"], w[freq + "1.bias"])), w[freq + "3.weight"],
                     w[freq + "3.bias"])
        h = torch.cat([e.view(B, 1, 1, D).expand(B, C, 1, D), h], dim=2)
    encoder, levels = "backbone.encoder.mlp_mixer_encoder.mixers.", config["adaptive_patching_levels"]
    for i, level in enumerate(reversed(range(levels))):
        f, N = split(D, level), h.shape[2]
        h = h.reshape(B, C, N * f, D // f)
        for j in range(config["num_layers"]):
            h = mixer(w, f"{encoder}{i}.mixer_layers.{j}.", h, config, False)
        h = h.reshape(B, C, N, D)
    for j in range(config["num_layers"] if levels == 0 else 0):
        h = mixer(w, f"{encoder}{j}.", h, config, False)
    if "decoder.adapter.weight" in w:
        h = F.linear(h, w["decoder.adapter.weight"], w["decoder.adapter.bias"])
    for j in range(config["decoder_num_layers"]):
        h = mixer(w, f"decoder.decoder_block.mixers.{j}.", h, config, config["decoder_mode"] == "mix_channel")
    y = F.linear(h.flatten(-2), w["head.base_forecast_block.weight"], w["head.base_forecast_block.bias"])
    return y.transpose(1, 2) * scale + loc


def reference_forecast(w, config, x, horizon, freq_token=None):
    """The first `horizon` points (prediction_filter_length), or beyond the head RecursivePredictor's rollout: each
    forecast appended to the context, which keeps its length."""
    steps, past = [], x
    while sum(s.shape[1] for s in steps) < horizon:
        steps.append(reference_forward(w, config, past, freq_token))
        past = torch.cat([past[:, steps[-1].shape[1]:], steps[-1]], dim=1)
    return torch.cat(steps, dim=1)[:, :horizon]


CONFIGS = {"r2": CONFIG, "prefix": PREFIX, "mixing": MIXING, "narrow": NARROW}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return {name: write_checkpoint(tmp_path_factory.mktemp(f"ttm-{name}"), config)
            for name, config in CONFIGS.items()}


def ours(folder, seq_len, horizon, channels=3, **hparams):
    return load("ttm", folder, seq_len, horizon, channels=channels, **hparams)


def test_the_published_weights_are_loaded_key_by_key(checkpoints):
    w = safetensors.load_file(str(checkpoints["prefix"] / "model.safetensors"))
    state = ours(checkpoints["prefix"], 48, 24, frequency_token=HOURLY).state_dict()
    encoder = "backbone.encoder.mlp_mixer_encoder.mixers."
    pairs = {"patcher.weight": "backbone.encoder.patcher.weight", "patcher.bias": "backbone.encoder.patcher.bias",
             "prefix.embedding.weight": "backbone.encoder.freq_mod.0.weight",
             "prefix.fc1.weight": "backbone.encoder.freq_mod.1.weight",
             "prefix.fc2.bias": "backbone.encoder.freq_mod.3.bias",
             "adapter.weight": "decoder.adapter.weight", "head.2.weight": "head.base_forecast_block.weight",
             "head.2.bias": "head.base_forecast_block.bias",
             # level 0 of ours and theirs: the finest split (4), its second layer's patch and feature mixers
             "backbone.0.layers.1.blocks.0.fc1.weight": f"{encoder}0.mixer_layers.1.patch_mixer.mlp.fc1.weight",
             "backbone.0.layers.1.blocks.1.gate.bias": f"{encoder}0.mixer_layers.1.feature_mixer.gating_block."
                                                       "attn_layer.bias",
             "backbone.2.layers.0.blocks.0.norm.weight": f"{encoder}2.mixer_layers.0.patch_mixer.norm.norm.weight",
             "decoder.1.blocks.1.fc2.bias": "decoder.decoder_block.mixers.1.feature_mixer.mlp.fc2.bias"}
    for mine, theirs in pairs.items():
        assert torch.equal(state[mine], w[theirs]), (mine, theirs)
    assert state["backbone.0.layers.0.blocks.0.fc1.weight"].shape == (56, 28)  # (6 patches + prefix) x 4, x 2
    assert len(state) == len(w) and sum(t.numel() for t in state.values()) == sum(t.numel() for t in w.values())
    mixing = ours(checkpoints["mixing"], 48, 24).state_dict()
    m = safetensors.load_file(str(checkpoints["mixing"] / "model.safetensors"))
    assert torch.equal(mixing["backbone.0.layers.1.blocks.1.fc1.weight"], m[f"{encoder}1.feature_mixer.mlp.fc1.weight"])
    assert torch.equal(mixing["decoder.0.blocks.0.gate.weight"],
                       m["decoder.decoder_block.mixers.0.channel_feature_mixer.gating_block.attn_layer.weight"])
    assert "adapter.weight" not in mixing and len(mixing) == len(m)


@pytest.mark.parametrize("name", ["r2", "prefix", "mixing", "narrow"])
@pytest.mark.parametrize("seq_len,horizon", [(48, 24), (48, 5), (43, 24), (48, 56), (30, 40)])
def test_the_forecast_is_tinytimemixer_for_prediction(checkpoints, name, seq_len, horizon):
    """Within the head (cut as prediction_filter_length cuts), beyond it (rolled out: 56 = 24 + 24 + 8), and from
    windows shorter than context_length (zero-padded in front, the zeros counted in the scaling)."""
    torch.manual_seed(1)
    x = torch.randn(2, seq_len, 3).cumsum(1) * 3 + 10  # (batch, time, channels): series with a level and a scale
    w = safetensors.load_file(str(checkpoints[name] / "model.safetensors"))
    expected = reference_forecast(w, CONFIGS[name], x, horizon, HOURLY)
    with torch.no_grad():
        forecast = ours(checkpoints[name], seq_len, horizon, frequency_token=HOURLY)(x)
    # float32 rounding, which each step fed back carries on: within 1e-5 of the forecast's largest |value|
    torch.testing.assert_close(forecast, expected, rtol=0, atol=1e-5 * expected.abs().max().item())


def test_the_mixing_decoder_mixes_channels_and_the_r2_one_keeps_them_apart(checkpoints):
    x = torch.randn(1, 48, 3).cumsum(1)
    changed = x.clone()
    changed[..., 0] += torch.randn(48)
    with torch.no_grad():
        for name, apart in (("r2", True), ("mixing", False)):
            model = ours(checkpoints[name], 48, 24)
            assert torch.equal(model(x)[..., 1:], model(changed)[..., 1:]) == apart


def test_training_mode_is_the_forecast_with_gradients(checkpoints):
    for name, horizon in (("prefix", 56), ("mixing", 24)):
        model = ours(checkpoints[name], 48, horizon, frequency_token=HOURLY, dropout=0.0, head_dropout=0.0,
                     decoder_dropout=0.0)
        assert_training_forecasts_alike_with_gradients(model, torch.randn(2, 48, 3).cumsum(1))


def test_the_architecture_comes_from_the_checkpoint(checkpoints):
    found = models.model_class("ttm").published(str(checkpoints["r2"]))
    assert found.hparams == {"patch_len": 8, "d_model": 32, "e_layers": 2, "ap_levels": 3, "ap_min_width": 4,
                             "d_layers": 2, "decoder_d_model": 16, "decoder_mode": "common_channel", "use_norm": True,
                             "expansion": 2, "decoder_adapter": True, "channel_gate": "input", "context_length": 48,
                             "horizon": 24, "resolution_prefix": 0}
    assert found.task == {} and found.max_seq_len == 48
    assert found.defaults == {"dropout": 0.4, "head_dropout": 0.4, "decoder_dropout": 0.4}
    assert models.model_class("ttm").published(str(checkpoints["r2"] / "model.safetensors")) == found  # or its file
    assert models.model_class("ttm").published(str(checkpoints["prefix"])).hparams["resolution_prefix"] == 10
    mixing = models.model_class("ttm").published(str(checkpoints["mixing"])).hparams
    assert (mixing["ap_levels"], mixing["decoder_adapter"], mixing["decoder_mode"]) == (1, False, "mix_channel")
    assert [level.factor for level in ours(checkpoints["narrow"], 48, 24).backbone] == [1, 2, 1]  # 16 / 4 unsplit


def _resolved(folder, *flags):
    return resolve(parse_args(["--model", "ttm", "--pretrained", str(folder), "--nonautoregressive", "--data", "ETTh1",
                               "--output_token_len", "16", *flags]))


def test_the_context_and_the_horizon_are_the_checkpoints_or_refused_in_one_line(checkpoints):
    config = _resolved(checkpoints["r2"], "--seq_len", "48")
    assert (config.context_length, config.horizon, config.patch_len, config.seq_len) == (48, 24, 8, 48)
    assert _resolved(checkpoints["r2"], "--seq_len", "40").context_length == 48  # zero-padded to 48
    cases = [(["--seq_len", "64"], r"--seq_len 64: the checkpoint at .* reads at most 48 points of context; give "
                                   r"--seq_len 48 or less"),
             (["--seq_len", "48", "--context_length", "32"], r"--context_length 32: the checkpoint at .* has "
                                                             r"context_length 48; give --context_length 48"),
             (["--seq_len", "48", "--horizon", "96"], r"--horizon 96: the checkpoint at .* has horizon 24"),
             (["--seq_len", "48", "--patch_len", "4"], r"--patch_len 4: the checkpoint at .* has patch_len 8")]
    for extra, message in cases:
        with pytest.raises(ConfigError, match=message):
            _resolved(checkpoints["r2"], *extra)


def test_what_the_checkpoint_cannot_forecast_is_refused_naming_it(checkpoints):
    with pytest.raises(ValueError, match="needs the data's frequency: give --frequency_token"):
        ours(checkpoints["prefix"], 48, 24)
    with pytest.raises(ValueError, match="frequency_token 12 is not among the resolution prefix's 10"):
        ours(checkpoints["prefix"], 48, 24, frequency_token=12)
    with pytest.raises(ValueError, match="the checkpoint's decoder mixes 3 channels .*the data has 2"):
        ours(checkpoints["mixing"], 48, 24, channels=2)
    with pytest.raises(ValueError, match="one value per point: a point loss, not 3 values"):
        load("ttm", checkpoints["r2"], 48, 16, n_outputs=3)


def test_a_missing_unexpected_or_misshapen_tensor_is_refused_naming_it(tmp_path, checkpoints):
    weights = random_weights(CONFIG)
    del weights["decoder.adapter.bias"]
    with pytest.raises(ValueError, match="missing decoder.adapter.bias"):
        ours(write_checkpoint(tmp_path / "missing", weights=weights), 48, 8)
    weights = {**random_weights(CONFIG), "backbone.encoder.positional_encoder.position_enc": torch.zeros(6, 32)}
    with pytest.raises(ValueError, match="unexpected backbone.encoder.positional_encoder.position_enc"):
        ours(write_checkpoint(tmp_path / "unexpected", weights=weights), 48, 8)
    weights = {**random_weights(CONFIG), "head.base_forecast_block.weight": torch.zeros(24, 64)}
    folder = write_checkpoint(tmp_path / "shape", weights=weights)
    with pytest.raises(ValueError, match=r"head.base_forecast_block.weight \(24, 64\) do not fit this model's "
                                         r"head.2.weight \(24, 96\)"):
        ours(folder, 48, 8)
    model = models.build("ttm", {"seq_len": 48, "output_token_len": 8, "enc_in": 1, "covariate": False},
                         {**{f.name: f.default for f in models.hyperparameter_fields(models.model_class("ttm"))},
                          **models.model_class("ttm").published(str(folder)).hparams, "horizon": 16})
    with pytest.raises(ValueError, match=r"architecture is not this model's: horizon 24 \(this model's 16\)"):
        model.load_published(str(checkpoints["r2"]))
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="weights in model.safetensors; found no such file"):
        ours(folder, 48, 8)


def test_a_path_that_is_not_a_published_ttm_is_refused_naming_what_it_is(tmp_path):
    published = models.model_class("ttm").published
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="expected a TinyTimeMixer checkpoint .*found a folder of model.safetensors"):
        published(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "timer", "input_token_len": 96}))
    with pytest.raises(ValueError, match="expected a TinyTimeMixer checkpoint .*found model_type 'timer'"):
        published(str(tmp_path))
    for change, named in [({"architectures": ["TinyTimeMixerForDecomposedPrediction"]},
                           "of TinyTimeMixerForPrediction, found TinyTimeMixerForDecomposedPrediction"),
                          ({"self_attn": True}, "expected self_attn False .*found True"),
                          ({"decoder_raw_residual": True}, "expected decoder_raw_residual False"),
                          ({"mode": "mix_channel"}, "expected mode common_channel .*found mix_channel"),
                          ({"prediction_filter_length": 12}, "expected prediction_filter_length None"),
                          ({"multi_scale": True}, "expected multi_scale False"),
                          ({"patch_stride": 4}, r"patch_stride = patch_length 8\), found patch_stride 4"),
                          ({"num_patches": 7}, "expected num_patches 6 .*found 7"),
                          ({"scaling": "mean"}, "expected scaling std or none .*found 'mean'"),
                          ({"loss": "nll"}, "found loss nll: a distribution head")]:
        (tmp_path / "config.json").write_text(json.dumps({**CONFIG, **change}))
        with pytest.raises(ValueError, match=named):
            published(str(tmp_path))
