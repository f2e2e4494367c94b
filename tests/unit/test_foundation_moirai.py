"""Moirai 2.0 read from a checkpoint in Salesforce's published layout (Salesforce/moirai-2.0-R-small: Moirai2Module's
config.json and model.safetensors) forecasts what the publisher's Moirai2Forecast.predict does.

The publisher's package pins an older torch than ours: scripts/equivalence/moirai.py compares with it in an
environment of its own. Here the reference is the publisher's pipeline written out by hand on the checkpoint's own
tensors: its packed sequence with the forecast's placeholder patches, its scaler, and the quantile paths fed back and
reduced by torch.quantile."""
import json
import math

import pytest
import torch
import torch.nn.functional as F

import models
from tests.published import assert_training_forecasts_alike_with_gradients, load

safetensors = pytest.importorskip("safetensors.torch")

LEVELS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
# a tiny checkpoint: width 128 (2 heads of 64), 2 layers, patches of 4, 2 patches (8 points) per forward
CONFIG = {"attn_dropout_p": 0.0, "d_ff": 48, "d_model": 128, "dropout_p": 0.0, "max_seq_len": 512, "num_layers": 2,
          "num_predict_token": 2, "patch_size": 4, "quantile_levels": LEVELS, "scaling": True}
# Salesforce/moirai-2.0-R-small's config.json
R_SMALL = {"attn_dropout_p": 0.0, "d_ff": 1024, "d_model": 384, "dropout_p": 0.0, "max_seq_len": 512, "num_layers": 6,
           "num_predict_token": 4, "patch_size": 16, "quantile_levels": LEVELS, "scaling": True}


def published_layout(config) -> dict:
    """The publisher's Moirai2Module state dict: every key and its shape."""
    D, F_, P = config["d_model"], config["d_ff"], config["patch_size"]
    out = config["num_predict_token"] * len(config["quantile_levels"]) * P
    shapes = {}
    for block, (d_in, d_out) in (("in_proj", (2 * P, D)), ("out_proj", (D, out))):
        shapes.update({f"{block}.hidden_layer.weight": (D, d_in), f"{block}.hidden_layer.bias": (D,),
                       f"{block}.output_layer.weight": (d_out, D), f"{block}.output_layer.bias": (d_out,),
                       f"{block}.residual_layer.weight": (d_out, d_in), f"{block}.residual_layer.bias": (d_out,)})
    for i in range(config["num_layers"]):
        layer = f"encoder.layers.{i}."
        for p in ("q", "k", "v", "out"):
            shapes[layer + f"self_attn.{p}_proj.weight"] = (D, D)
        shapes[layer + "self_attn.q_norm.weight"] = shapes[layer + "self_attn.k_norm.weight"] = (64,)
        shapes[layer + "self_attn.var_attn_bias.emb.weight"] = (2, D // 64)
        shapes[layer + "ffn.fc_gate.weight"] = shapes[layer + "ffn.fc1.weight"] = (F_, D)
        shapes[layer + "ffn.fc2.weight"] = (D, F_)
        shapes[layer + "norm1.weight"] = shapes[layer + "norm2.weight"] = (D,)
    shapes["encoder.norm.weight"] = (D,)
    return shapes


def write_checkpoint(folder, config=CONFIG, weights=None):
    """A checkpoint in the layout Moirai2Module.save_pretrained writes: config.json (its constructor's arguments) and
    model.safetensors (its state dict)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    safetensors.save_file(weights if weights is not None else random_weights(config), str(folder / "model.safetensors"))
    return folder


def random_weights(config, seed=0) -> dict:
    """Matrices at the scale of their fan-in, norm weights around 1, biases around 0: every tensor moves the
    forecast."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for key, shape in published_layout(config).items():
        noise = torch.randn(shape, generator=generator)
        weights[key] = noise * 1.2 / shape[1] ** 0.5 if len(shape) == 2 else \
            1 + 0.2 * noise if "norm" in key else 0.1 * noise
    return weights


def defaults() -> dict:
    return {f.name: f.default for f in models.hyperparameter_fields(models.model_class("moirai"))}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("moirai-tiny"))


def rms(x, weight):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * weight


def residual_block(x, w, name):
    hidden = F.silu(F.linear(x, w[f"{name}.hidden_layer.weight"], w[f"{name}.hidden_layer.bias"]))
    return F.linear(hidden, w[f"{name}.output_layer.weight"], w[f"{name}.output_layer.bias"]) \
        + F.linear(x, w[f"{name}.residual_layer.weight"], w[f"{name}.residual_layer.bias"])


def module_forward(w, config, target, observed, time_id, prediction_mask):
    """Moirai2Module.forward in eval mode on rows of one series each (B, S, P): the scaled-back quantiles of the
    patches after every token (B, S, T * Q * P). The scaler reads the observed points outside the prediction mask."""
    D, layers = config["d_model"], config["num_layers"]
    heads = D // 64
    hd = D // heads
    counted = (observed & ~prediction_mask[..., None]).double()
    x = target.double()
    n = counted.sum((1, 2), keepdim=True)
    loc = (x * counted).sum((1, 2), keepdim=True) / torch.where(n == 0, 1, n)
    var = ((x - loc) ** 2 * counted).sum((1, 2), keepdim=True) / torch.where(n - 1 == 0, 1, n - 1)
    loc, scale = loc.float(), torch.sqrt(var + 1e-5).float()
    h = residual_block(torch.cat([(target - loc) / scale, observed.float()], -1), w, "in_proj")
    B, S = h.shape[:2]
    allowed = time_id[None, :] <= time_id[:, None]  # one sample id: causal on the time ids
    width = hd // 2  # rotary on the first half of each head, adjacent pairs
    theta = 1.0 / torch.pow(10000, torch.arange(0, width, 2, dtype=torch.float) / width)
    angles = time_id.float()[:, None] * theta
    cos, sin = angles.cos().repeat_interleave(2, -1), angles.sin().repeat_interleave(2, -1)

    def rope(v):
        part = v[..., :width]
        turned = torch.stack([-part[..., 1::2], part[..., 0::2]], -1).flatten(-2)
        return torch.cat([cos * part + sin * turned, v[..., width:]], -1)

    for i in range(layers):
        layer = f"encoder.layers.{i}."
        a = rms(h, w[layer + "norm1.weight"])
        q, k, v = (F.linear(a, w[layer + f"self_attn.{p}_proj.weight"]).view(B, S, heads, hd).transpose(1, 2)
                   for p in "qkv")
        q, k = rope(rms(q, w[layer + "self_attn.q_norm.weight"])), rope(rms(k, w[layer + "self_attn.k_norm.weight"]))
        scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
        emb = w[layer + "self_attn.var_attn_bias.emb.weight"]  # one variate: the same-variate row for every pair
        scores = (scores + emb[1][:, None, None]).masked_fill(~allowed, float("-inf"))
        h = h + F.linear((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, S, D),
                         w[layer + "self_attn.out_proj.weight"])
        b = rms(h, w[layer + "norm2.weight"])
        gated = F.silu(F.linear(b, w[layer + "ffn.fc_gate.weight"])) * F.linear(b, w[layer + "ffn.fc1.weight"])
        h = h + F.linear(gated, w[layer + "ffn.fc2.weight"])
    return residual_block(rms(h, w["encoder.norm.weight"]), w, "out_proj") * scale + loc


def reference_predict(w, config, seqs, context_length, horizon):
    """Moirai2Forecast(context_length, prediction_length=horizon, target_dim=1).predict(seqs) on the weights w (its
    keys): quantiles (series, Q, horizon). The context's last points padded in front to whole patches (zeros, not
    observed), then the forecast's placeholder patches (zeros, observed, in the prediction mask); the quantiles of T
    patches read after the last context patch; beyond them each quantile's path written into its own copy of the
    sequence (unmasked), and each next T patches' Q x Q values reduced by torch.quantile."""
    P, T, Q = config["patch_size"], config["num_predict_token"], len(config["quantile_levels"])
    context = seqs[:, -context_length:]
    S, C = context.shape
    pad, future = -C % P, -(-horizon // P)
    past = F.pad(context, (pad, 0)).view(S, -1, P)
    N = past.shape[1]
    target = torch.cat([past, torch.zeros(S, future, P)], 1)
    observed = torch.cat([F.pad(torch.ones(S, C, dtype=torch.bool), (pad, 0)),
                          F.pad(torch.ones(S, horizon, dtype=torch.bool), (0, future * P - horizon))], 1).view(S, -1, P)
    time_id = torch.arange(N + future)
    masked = (time_id >= N).expand(S, -1)
    preds = module_forward(w, config, target, observed, time_id, masked).view(S, N + future, T, Q, P)
    quantiles = target[:, :, None].repeat(1, 1, Q, 1)
    first = min(T, future)
    quantiles[:, N:N + first] = preds[:, N - 1, :first]
    paths, path_masks = target[:, None].repeat(1, Q, 1, 1), masked[:, None].repeat(1, Q, 1)
    paths[:, :, N:N + first], path_masks[..., N:N + first] = preds[:, N - 1, :first].transpose(1, 2), False
    done = first
    while done < future:
        n = min(T, future - done)
        out = module_forward(w, config, paths.flatten(0, 1), observed.repeat_interleave(Q, 0), time_id,
                             path_masks.flatten(0, 1)).view(S, Q, N + future, T, Q, P)
        step = out[:, :, N + done - 1, :n].permute(0, 2, 1, 3, 4).reshape(S, n, Q * Q, P)
        reduced = torch.quantile(step, torch.tensor(config["quantile_levels"]), dim=2)  # (Q, S, n, P)
        quantiles[:, N + done:N + done + n] = reduced.permute(1, 2, 0, 3)
        paths[:, :, N + done:N + done + n], path_masks[..., N + done:N + done + n] = reduced.transpose(0, 1), False
        done += n
    return quantiles[:, N:].permute(0, 2, 1, 3).reshape(S, Q, -1)[..., :horizon]


def test_the_published_weights_are_loaded_key_by_key(checkpoint):
    w = safetensors.load_file(str(checkpoint / "model.safetensors"))
    state = load("moirai", checkpoint, 64, 8).state_dict()
    D = CONFIG["d_model"]
    pairs = [("norm.weight", "encoder.norm.weight")]
    for ours, theirs in (("embedding", "in_proj"), ("head", "out_proj")):
        pairs += [(f"{ours}.{a}.{kind}", f"{theirs}.{b}.{kind}") for kind in ("weight", "bias")
                  for a, b in (("hidden", "hidden_layer"), ("out", "output_layer"), ("residual", "residual_layer"))]
    for i in range(CONFIG["num_layers"]):
        mine, theirs = f"layers.{i}.", f"encoder.layers.{i}."
        for j, p in enumerate("qkv"):  # q, k, v: one fused projection, in that order
            assert torch.equal(state[mine + "attention.qkv.weight"][j * D:(j + 1) * D],
                               w[theirs + f"self_attn.{p}_proj.weight"])
        pairs += [(mine + a + ".weight", theirs + b + ".weight") for a, b in
                  (("norm1", "norm1"), ("norm2", "norm2"), ("attention.out", "self_attn.out_proj"),
                   ("attention.q_norm", "self_attn.q_norm"), ("attention.k_norm", "self_attn.k_norm"),
                   ("attention.variate_bias", "self_attn.var_attn_bias.emb"), ("ffn.gate", "ffn.fc_gate"),
                   ("ffn.up", "ffn.fc1"), ("ffn.down", "ffn.fc2"))]
    for mine, theirs in pairs:
        assert torch.equal(state[mine], w[theirs]), (mine, theirs)
    # every published tensor is in the model, and the model holds nothing else
    assert {m for m, _ in pairs} | {f"layers.{i}.attention.qkv.weight" for i in range(2)} == set(state)
    assert sum(t.numel() for t in state.values()) == sum(t.numel() for t in w.values())


@pytest.mark.parametrize("seq_len,context_length,horizon", [(64, 64, 5), (64, 64, 8), (61, 61, 13), (64, 37, 20),
                                                            (7, 32, 30)])
def test_the_forecast_is_the_publishers_predict(checkpoint, seq_len, context_length, horizon):
    """Within one forward (5: cut; 8: its 2 patches), beyond it (13: one more forward; 20, 30: two and three more,
    the last one cut), contexts that are not whole patches (61; 37: the window cut to context_length; 7: a window
    shorter than context_length, which is the publisher's context_length 7). Every quantile, and the median as the
    point forecast."""
    torch.manual_seed(1)
    x = torch.randn(2, seq_len, 3).cumsum(1) * 3 + 10  # (batch, time, channels): series with a level and a scale
    w = safetensors.load_file(str(checkpoint / "model.safetensors"))
    expected = reference_predict(w, CONFIG, x.transpose(1, 2).reshape(6, seq_len), min(seq_len, context_length),
                                 horizon)
    expected = expected.reshape(2, 3, 9, horizon).permute(0, 3, 1, 2)  # (batch, horizon, channels, quantiles)
    with torch.no_grad():
        quantiles = load("moirai", checkpoint, seq_len, horizon, n_outputs=9, context_length=context_length)(x)
        point = load("moirai", checkpoint, seq_len, horizon, context_length=context_length)(x)
    torch.testing.assert_close(quantiles, expected, rtol=1e-5, atol=1e-4)
    assert torch.equal(point, quantiles[..., LEVELS.index(0.5)])


def test_training_mode_is_the_forecast_with_gradients_and_a_flat_window_stays_finite(checkpoint):
    model = load("moirai", checkpoint, 32, 20, n_outputs=9)  # two forwards beyond the first
    assert_training_forecasts_alike_with_gradients(model, torch.randn(2, 32, 3).cumsum(1))
    with torch.no_grad():
        assert torch.isfinite(model.eval()(torch.ones(1, 32, 3))).all()  # std 0: the scaler's 1e-5 keeps it finite


def test_the_architecture_comes_from_the_checkpoint(checkpoint, tmp_path):
    published = models.model_class("moirai").published
    found = published(str(checkpoint))
    assert found.hparams == {"d_model": 128, "n_heads": 2, "e_layers": 2, "d_ff": 48, "patch_len": 4,
                             "predict_tokens": 2, "quantile_levels": "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9"}
    assert found.task == {} and found.max_seq_len is None and found.defaults == {"dropout": 0.0, "attn_dropout": 0.0}
    assert published(str(checkpoint / "model.safetensors")) == found  # or its file
    (tmp_path / "config.json").write_text(json.dumps(R_SMALL))
    small = published(str(tmp_path))
    assert {**defaults(), **small.hparams, **small.defaults} == defaults()  # the defaults are moirai-2.0-R-small's
    with torch.device("meta"):
        model = models.build("moirai", {"seq_len": 1680, "output_token_len": 96, "enc_in": 1, "covariate": False},
                             defaults())
    assert 11.3e6 < sum(p.numel() for p in model.parameters()) < 11.5e6


def test_a_missing_unexpected_or_misshapen_tensor_is_refused_naming_it(tmp_path):
    weights = random_weights(CONFIG)
    del weights["encoder.layers.1.ffn.fc1.weight"]
    folder = write_checkpoint(tmp_path / "missing", weights=weights)
    with pytest.raises(ValueError, match="missing encoder.layers.1.ffn.fc1.weight"):
        load("moirai", folder, 64, 8)
    weights = {**random_weights(CONFIG), "encoder.centroid": torch.ones(2, 32, 128)}
    folder = write_checkpoint(tmp_path / "unexpected", weights=weights)
    with pytest.raises(ValueError, match="unexpected encoder.centroid"):
        load("moirai", folder, 64, 8)
    weights = {**random_weights(CONFIG), "out_proj.output_layer.weight": torch.zeros(16, 128)}
    folder = write_checkpoint(tmp_path / "shape", weights=weights)
    with pytest.raises(ValueError, match=r"out_proj.output_layer.weight \(16, 128\) do not fit this model's "
                                         r"head.out.weight"):
        load("moirai", folder, 64, 8)
    model = models.build("moirai", {"seq_len": 64, "output_token_len": 8, "enc_in": 1, "covariate": False},
                         {**defaults(), "d_model": 128, "n_heads": 2, "e_layers": 2, "d_ff": 48, "patch_len": 4,
                          "predict_tokens": 1})
    with pytest.raises(ValueError, match=r"architecture is not this model's: predict_tokens 2 \(this model's 1\)"):
        model.load_published(str(tmp_path / "missing"))
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="weights in model.safetensors; found no such file"):
        load("moirai", folder, 64, 8)


def test_a_path_that_is_not_a_moirai_2_checkpoint_is_refused_naming_what_it_is(tmp_path):
    published = models.model_class("moirai").published
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="expected a Moirai 2.0 checkpoint .*found a folder of model.safetensors"):
        published(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5", "d_model": 512}))
    with pytest.raises(ValueError, match="expected a Moirai 2.0 checkpoint .*found model_type 't5'"):
        published(str(tmp_path))
    moirai_1 = {"d_model": 384, "num_layers": 6, "patch_sizes": [8, 16, 32, 64, 128], "max_seq_len": 512,
                "attn_dropout_p": 0.0, "dropout_p": 0.0, "scaling": True, "distr_output": {}}
    (tmp_path / "config.json").write_text(json.dumps(moirai_1))
    with pytest.raises(ValueError, match="found a Moirai 1.x or Moirai-MoE checkpoint"):
        published(str(tmp_path))
    for change, named in [({"scaling": False}, "expected scaling true"),
                          ({"d_model": 32}, "d_model of at least 64 .*found 32"),
                          ({"quantile_levels": [0.9, 0.1]}, "quantile_levels must increase")]:
        (tmp_path / "config.json").write_text(json.dumps({**CONFIG, **change}))
        with pytest.raises(ValueError, match=named):
            published(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in CONFIG.items() if k != "dropout_p"}))
    with pytest.raises(ValueError, match="with dropout_p in config.json, found none"):
        published(str(tmp_path))
