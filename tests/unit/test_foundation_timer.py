"""Timer read from a checkpoint in thuml's published layout (thuml/timer-base-84m: config.json and model.safetensors)
forecasts what the publisher's generate(seqs, max_new_tokens=H) does.

The publisher's code needs an older transformers than ours: scripts/equivalence/timer.py compares with it in an
environment of its own. Here the reference is the publisher's rollout written out by hand on the checkpoint's own
tensors, key-value cache and all."""
import json
import math

import pytest
import torch
import torch.nn.functional as F

import models
from tests.published import assert_training_forecasts_alike_with_gradients, load

safetensors = pytest.importorskip("safetensors.torch")

# a tiny checkpoint: patches of 8, two output heads (8 and 24 points), 2 layers of width 16
CONFIG = {"architectures": ["TimerForPrediction"], "model_type": "timer", "input_token_len": 8, "hidden_size": 16,
          "intermediate_size": 24, "output_token_lens": [8, 24], "num_hidden_layers": 2, "num_attention_heads": 2,
          "hidden_act": "silu", "attention_dropout": 0.0, "use_cache": True, "rope_theta": 10000,
          "max_position_embeddings": 10000, "initializer_range": 0.02, "torch_dtype": "float32"}
# thuml/timer-base-84m's config.json, as far as the architecture goes
BASE_84M = {"model_type": "timer", "input_token_len": 96, "hidden_size": 1024, "intermediate_size": 2048,
            "output_token_lens": [96], "num_hidden_layers": 8, "num_attention_heads": 8, "hidden_act": "silu",
            "attention_dropout": 0.0, "use_cache": True, "rope_theta": 10000, "max_position_embeddings": 10000}


def published_layout(config) -> dict:
    """The publisher's TimerForPrediction state dict: every key and its shape."""
    D, F_, P = config["hidden_size"], config["intermediate_size"], config["input_token_len"]
    shapes = {"model.embed_layer.emb.weight": (D, P)}
    for i in range(config["num_hidden_layers"]):
        layer = f"model.layers.{i}."
        for p in ("q", "k", "v"):
            shapes[layer + f"self_attn.{p}_proj.weight"] = (D, D)
            shapes[layer + f"self_attn.{p}_proj.bias"] = (D,)
        shapes[layer + "self_attn.o_proj.weight"] = (D, D)
        shapes[layer + "ffn_layer.gate_proj.weight"] = (F_, D)
        shapes[layer + "ffn_layer.up_proj.weight"] = (F_, D)
        shapes[layer + "ffn_layer.down_proj.weight"] = (D, F_)
        for norm in ("norm1", "norm2"):
            shapes[layer + f"{norm}.weight"] = (D,)
            shapes[layer + f"{norm}.bias"] = (D,)
    shapes["model.norm.weight"], shapes["model.norm.bias"] = (D,), (D,)
    for j, length in enumerate(config["output_token_lens"]):
        shapes[f"lm_heads.{j}.weight"] = (length, D)
    return shapes


def write_checkpoint(folder, config=CONFIG, weights=None):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    safetensors.save_file(weights if weights is not None else random_weights(config), str(folder / "model.safetensors"))
    return folder


def random_weights(config, seed=0) -> dict:
    """Wide random values (LayerNorm weights around 1), so that every tensor moves the forecast."""
    generator = torch.Generator().manual_seed(seed)
    return {key: torch.randn(shape, generator=generator) * (0.1 if key.endswith("bias") else 0.3)
            + (1.0 if "norm" in key and key.endswith("weight") else 0.0)
            for key, shape in published_layout(config).items()}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("timer-tiny"))


def ours(folder, seq_len, horizon, channels=3):
    return load("timer_hf", folder, seq_len, horizon, channels=channels)


def rotate(x, positions, head_dim):
    """Rotary embedding as the publisher applies it: x cos + rotate_half(x) sin, base 10000, over the whole head."""
    inv_freq = 1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = positions.float()[:, None] * inv_freq
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    x1, x2 = x[..., :head_dim // 2], x[..., head_dim // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def reference_generate(w, config, seqs, horizon):
    """generate(seqs, max_new_tokens=horizon) of the publisher's TimerForPrediction on the weights w (its keys):
    the last whole patches; each step scales the new points by their own mean and std (revin; the first step: the
    context), runs them against the key-value cache of all before, reads the longest head that fits (the first if
    none does) after the last patch, cuts it to the points left, unscales it and appends it."""
    P, D, n_heads = config["input_token_len"], config["hidden_size"], config["num_attention_heads"]
    head_dim, lengths = D // n_heads, config["output_token_lens"]
    chunk = seqs[:, seqs.shape[1] % P:]
    S = chunk.shape[0]
    cache = [[None, None] for _ in range(config["num_hidden_layers"])]
    past, forecasts, remaining = 0, [], horizon
    while remaining > 0:
        mean, std = chunk.mean(-1, keepdim=True), chunk.std(-1, keepdim=True)
        h = F.linear(((chunk - mean) / std).unfold(-1, P, P), w["model.embed_layer.emb.weight"])
        t = h.shape[1]
        positions = torch.arange(past, past + t)
        for i, kv in enumerate(cache):
            layer = f"model.layers.{i}."
            q, k, v = (F.linear(h, w[layer + f"self_attn.{p}_proj.weight"], w[layer + f"self_attn.{p}_proj.bias"])
                       .view(S, t, n_heads, head_dim).transpose(1, 2) for p in "qkv")
            q, k = rotate(q, positions, head_dim), rotate(k, positions, head_dim)
            kv[0] = k if kv[0] is None else torch.cat([kv[0], k], dim=2)
            kv[1] = v if kv[1] is None else torch.cat([kv[1], v], dim=2)
            scores = q @ kv[0].transpose(-1, -2) / math.sqrt(head_dim)
            scores = scores.masked_fill(torch.arange(past + t)[None, :] > positions[:, None], float("-inf"))
            attended = (scores.softmax(-1) @ kv[1]).transpose(1, 2).reshape(S, t, D)
            h = F.layer_norm(h + F.linear(attended, w[layer + "self_attn.o_proj.weight"]), (D,),
                             w[layer + "norm1.weight"], w[layer + "norm1.bias"])
            gated = F.silu(F.linear(h, w[layer + "ffn_layer.gate_proj.weight"])) \
                * F.linear(h, w[layer + "ffn_layer.up_proj.weight"])
            mlp = F.linear(gated, w[layer + "ffn_layer.down_proj.weight"])
            h = F.layer_norm(h + mlp, (D,), w[layer + "norm2.weight"], w[layer + "norm2.bias"])
        last = F.layer_norm(h[:, -1], (D,), w["model.norm.weight"], w["model.norm.bias"])
        head = 0
        for j in range(1, len(lengths)):
            if lengths[j] > remaining:
                break
            head = j
        forecast = F.linear(last, w[f"lm_heads.{head}.weight"])[:, :remaining] * std + mean
        forecasts.append(forecast)
        remaining -= forecast.shape[1]
        past, chunk = past + t, forecast
    return torch.cat(forecasts, dim=-1)


def test_the_published_weights_are_loaded_key_by_key(checkpoint):
    w = safetensors.load_file(str(checkpoint / "model.safetensors"))
    state = ours(checkpoint, 64, 8).state_dict()
    D = CONFIG["hidden_size"]
    pairs = [("embedding.weight", "model.embed_layer.emb.weight"), ("norm.weight", "model.norm.weight"),
             ("norm.bias", "model.norm.bias"), ("heads.0.weight", "lm_heads.0.weight"),
             ("heads.1.weight", "lm_heads.1.weight")]
    for i in range(CONFIG["num_hidden_layers"]):
        mine, theirs = f"layers.{i}.", f"model.layers.{i}."
        for kind in ("weight", "bias"):
            for j, p in enumerate("qkv"):  # q, k, v: one fused projection, in that order
                assert torch.equal(state[mine + f"attention.qkv.{kind}"][j * D:(j + 1) * D],
                                   w[theirs + f"self_attn.{p}_proj.{kind}"])
            pairs += [(mine + f"{norm}.{kind}", theirs + f"{norm}.{kind}") for norm in ("norm1", "norm2")]
        pairs += [(mine + "attention.out.weight", theirs + "self_attn.o_proj.weight"),
                  (mine + "ffn.gate.weight", theirs + "ffn_layer.gate_proj.weight"),
                  (mine + "ffn.up.weight", theirs + "ffn_layer.up_proj.weight"),
                  (mine + "ffn.down.weight", theirs + "ffn_layer.down_proj.weight")]
    for mine, theirs in pairs:
        assert torch.equal(state[mine], w[theirs]), (mine, theirs)
    # every published tensor is in the model, and the model holds nothing else
    assert {m for m, _ in pairs} | {f"layers.{i}.attention.qkv.{k}" for i in range(2) for k in ("weight", "bias")} \
        == set(state)
    assert sum(t.numel() for t in state.values()) == sum(t.numel() for t in w.values())


@pytest.mark.parametrize("seq_len,horizon", [(64, 5), (64, 8), (61, 20), (64, 56), (17, 30)])
def test_the_forecast_is_the_publishers_generate(checkpoint, seq_len, horizon):
    """Within one head (cut), beyond it (heads of 8 and 24 chosen and cut per step: 20 = 8 + 8 + 4, 56 = 24 + 24 + 8,
    30 = 24 + 6), and from windows that are not whole patches (61, 17: the points before the last whole ones
    dropped)."""
    torch.manual_seed(1)
    x = torch.randn(2, seq_len, 3).cumsum(1) * 3 + 10  # (batch, time, channels): series with a level and a scale
    w = safetensors.load_file(str(checkpoint / "model.safetensors"))
    expected = reference_generate(w, CONFIG, x.transpose(1, 2).reshape(6, seq_len), horizon)
    expected = expected.reshape(2, 3, horizon).transpose(1, 2)
    with torch.no_grad():
        forecast = ours(checkpoint, seq_len, horizon)(x)
    # fp32 round-off grows with each rolled-out head and with the kernels' summation order, which differs between CPUs
    # (AVX2 / AVX-512: 1.3e-4 at 56 points on forecasts of size 74), so the bound is relative to the forecast's size
    torch.testing.assert_close(forecast, expected, rtol=1e-5, atol=2e-5 * expected.abs().max().item())


def test_the_forecast_ignores_the_scale_and_shift_of_the_input(checkpoint):
    """generate's own scaling: the framework's per-dataset standardisation does not change the forecast."""
    model = ours(checkpoint, 64, 40)
    x = torch.randn(2, 64, 3).cumsum(1)
    with torch.no_grad():
        torch.testing.assert_close(model(x * 7 - 3), model(x) * 7 - 3, rtol=1e-4, atol=1e-4)


def test_training_mode_is_the_forecast_with_gradients_and_a_flat_window_stays_finite(checkpoint):
    model = ours(checkpoint, 64, 56)
    assert_training_forecasts_alike_with_gradients(model, torch.randn(2, 64, 3).cumsum(1))
    with torch.no_grad():
        assert torch.isfinite(model.eval()(torch.ones(1, 64, 3))).all()  # generate: NaN (std 0)


def test_the_architecture_comes_from_the_checkpoint(checkpoint, tmp_path):
    found = models.model_class("timer_hf").published(str(checkpoint))
    assert found.hparams == {"d_model": 16, "n_heads": 2, "e_layers": 2, "d_ff": 24, "patch_len": 8,
                             "output_heads": "8,24"}
    assert found.task == {} and found.max_seq_len is None and found.defaults == {"dropout": 0.0}
    assert models.model_class("timer_hf").published(str(checkpoint / "model.safetensors")) == found  # or its file
    (tmp_path / "config.json").write_text(json.dumps(BASE_84M))
    base = models.model_class("timer_hf").published(str(tmp_path))
    defaults = {f.name: f.default for f in models.hyperparameter_fields(models.model_class("timer_hf"))}
    assert {**defaults, **base.hparams, **base.defaults} == defaults  # the defaults are timer-base-84m's
    with torch.device("meta"):
        model = models.build("timer_hf", {"seq_len": 672, "output_token_len": 96, "enc_in": 1, "covariate": False},
                             {**base.defaults, **base.hparams})
    assert 84e6 < sum(p.numel() for p in model.parameters()) < 85e6


def test_a_missing_unexpected_or_misshapen_tensor_is_refused_naming_it(tmp_path):
    weights = random_weights(CONFIG)
    del weights["model.layers.1.ffn_layer.up_proj.weight"]
    folder = write_checkpoint(tmp_path / "missing", weights=weights)
    with pytest.raises(ValueError, match="missing model.layers.1.ffn_layer.up_proj.weight"):
        ours(folder, 64, 8)
    weights = {**random_weights(CONFIG), "model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(4)}
    folder = write_checkpoint(tmp_path / "unexpected", weights=weights)
    with pytest.raises(ValueError, match="unexpected model.layers.0.self_attn.rotary_emb.inv_freq"):
        ours(folder, 64, 8)
    weights = {**random_weights(CONFIG), "lm_heads.1.weight": torch.zeros(16, 16)}
    folder = write_checkpoint(tmp_path / "shape", weights=weights)
    with pytest.raises(ValueError, match=r"lm_heads.1.weight \(16, 16\) do not fit this model's heads.1.weight"):
        ours(folder, 64, 8)
    model = models.build("timer_hf", {"seq_len": 64, "output_token_len": 8, "enc_in": 1, "covariate": False},
                         {"d_model": 16, "n_heads": 4, "e_layers": 2, "d_ff": 24, "patch_len": 8,
                          "output_heads": "8,24", "dropout": 0.0})
    with pytest.raises(ValueError, match=r"architecture is not this model's: n_heads 2 \(this model's 4\)"):
        model.load_published(str(tmp_path / "missing"))  # every shape fits: the heads show in none
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="weights in model.safetensors; found no such file"):
        ours(folder, 64, 8)


def test_a_path_that_is_not_a_timer_checkpoint_is_refused_naming_what_it_is(tmp_path):
    published = models.model_class("timer_hf").published
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="expected a Timer checkpoint .*found a folder of model.safetensors"):
        published(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5", "d_model": 512}))
    with pytest.raises(ValueError, match="expected a Timer checkpoint .*found model_type 't5'"):
        published(str(tmp_path))
    for change, named in [({"hidden_act": "gelu"}, "hidden_act silu .*found 'gelu'"),
                          ({"use_cache": False}, "use_cache true"),
                          ({"output_token_lens": [12]}, r"multiple of input_token_len 8 .*found \[12\]"),
                          ({"output_token_lens": [24, 8]}, r"output_token_lens that increase.*found \[24, 8\]")]:
        (tmp_path / "config.json").write_text(json.dumps({**CONFIG, **change}))
        with pytest.raises(ValueError, match=named):
            published(str(tmp_path))
