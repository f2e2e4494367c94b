"""Sundial read from a checkpoint in thuml's published layout (thuml/sundial-base-128m: config.json and
model.safetensors) forecasts what the publisher's generate(seqs, max_new_tokens=H, num_samples=N) does, given the same
noise.

The publisher's code needs an older transformers than ours: scripts/equivalence/sundial.py compares with it in an
environment of its own. Here the reference is the publisher's rollout written out by hand on the checkpoint's own
tensors (key-value cache, sample-major noise rows, the median fed back and all), fed the noise our model draws."""
import json
import math

import pytest
import torch
import torch.nn.functional as F

import models
from tests.published import load

safetensors = pytest.importorskip("safetensors.torch")

# a tiny checkpoint: patches of 8, a flow head of 16 points (2 blocks, 6 Euler steps), 2 layers of width 16
CONFIG = {"architectures": ["SundialForPrediction"], "model_type": "sundial", "input_token_len": 8, "hidden_size": 16,
          "intermediate_size": 24, "output_token_lens": [16], "num_hidden_layers": 2, "num_attention_heads": 2,
          "hidden_act": "silu", "use_cache": True, "rope_theta": 10000, "dropout_rate": 0.0,
          "initializer_range": 0.02, "max_position_embeddings": 10000, "flow_loss_depth": 2, "num_sampling_steps": 6,
          "diffusion_batch_mul": 2, "torch_dtype": "float32"}
# thuml/sundial-base-128m's config.json, as far as the architecture goes (its SundialConfig's defaults)
BASE_128M = {"model_type": "sundial", "input_token_len": 16, "hidden_size": 768, "intermediate_size": 3072,
             "output_token_lens": [720], "num_hidden_layers": 12, "num_attention_heads": 12, "hidden_act": "silu",
             "use_cache": True, "rope_theta": 10000, "dropout_rate": 0.1, "max_position_embeddings": 10000,
             "flow_loss_depth": 3, "num_sampling_steps": 50, "diffusion_batch_mul": 4}
FREQUENCIES = 256  # the flow time's sinusoidal embedding (the publisher's frequency_embedding_size)


def published_layout(config) -> dict:
    """The publisher's SundialForPrediction state dict: every key and its shape."""
    D, F_, P = config["hidden_size"], config["intermediate_size"], config["input_token_len"]
    O = config["output_token_lens"][-1]
    shapes = {"model.embed_layer.hidden_layer.weight": (F_, 2 * P), "model.embed_layer.hidden_layer.bias": (F_,),
              "model.embed_layer.output_layer.weight": (D, F_), "model.embed_layer.output_layer.bias": (D,),
              "model.embed_layer.residual_layer.weight": (D, 2 * P), "model.embed_layer.residual_layer.bias": (D,)}
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
    net = "flow_loss.net."
    shapes.update({net + "time_embed.mlp.0.weight": (D, FREQUENCIES), net + "time_embed.mlp.0.bias": (D,),
                   net + "time_embed.mlp.2.weight": (D, D), net + "time_embed.mlp.2.bias": (D,),
                   net + "cond_embed.weight": (D, D), net + "cond_embed.bias": (D,),
                   net + "input_proj.weight": (D, O), net + "input_proj.bias": (D,)})
    for j in range(config["flow_loss_depth"]):
        block = f"{net}res_blocks.{j}."
        shapes.update({block + "in_ln.weight": (D,), block + "in_ln.bias": (D,),
                       block + "mlp.0.weight": (D, D), block + "mlp.0.bias": (D,),
                       block + "mlp.2.weight": (D, D), block + "mlp.2.bias": (D,),
                       block + "adaLN_modulation.1.weight": (3 * D, D), block + "adaLN_modulation.1.bias": (3 * D,)})
    shapes.update({net + "final_layer.linear.weight": (O, D), net + "final_layer.linear.bias": (O,),
                   net + "final_layer.adaLN_modulation.1.weight": (2 * D, D),
                   net + "final_layer.adaLN_modulation.1.bias": (2 * D,)})
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
            + (1.0 if ("norm" in key or "in_ln" in key) and key.endswith("weight") else 0.0)
            for key, shape in published_layout(config).items()}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("sundial-tiny"))


@pytest.fixture(scope="module")
def weights(checkpoint):
    return safetensors.load_file(str(checkpoint / "model.safetensors"))


def ours(folder, seq_len, horizon, channels=3, n_outputs=1, **hparams):
    """models/sundial.py as --pretrained builds it, with 5 samples unless given."""
    return load("sundial", folder, seq_len, horizon, n_outputs, channels, **{"samples": 5, **hparams})


def rotate(x, positions, head_dim):
    """Rotary embedding as the publisher applies it: x cos + rotate_half(x) sin, base 10000, over the whole head."""
    inv_freq = 1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)
    angles = positions.float()[:, None] * inv_freq
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    x1, x2 = x[..., :head_dim // 2], x[..., head_dim // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def reference_net(w, x, t, c):
    """The publisher's SimpleMLPAdaLN: the clean patch predicted from noised patches x (rows, O), flow times t (rows,)
    (already times 1000) and conditions c (rows, D)."""
    net = "flow_loss.net."
    half = FREQUENCIES // 2
    angles = t[:, None] * torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32) / half)[None]
    embedded = torch.cat([angles.cos(), angles.sin()], -1)
    time = F.linear(F.silu(F.linear(embedded, w[net + "time_embed.mlp.0.weight"], w[net + "time_embed.mlp.0.bias"])),
                    w[net + "time_embed.mlp.2.weight"], w[net + "time_embed.mlp.2.bias"])
    y = time + F.linear(c, w[net + "cond_embed.weight"], w[net + "cond_embed.bias"])
    h = F.linear(x, w[net + "input_proj.weight"], w[net + "input_proj.bias"])
    width = h.shape[-1]
    j = 0
    while f"{net}res_blocks.{j}.in_ln.weight" in w:
        block = f"{net}res_blocks.{j}."
        shift, scale, gate = F.linear(F.silu(y), w[block + "adaLN_modulation.1.weight"],
                                      w[block + "adaLN_modulation.1.bias"]).chunk(3, -1)
        a = F.layer_norm(h, (width,), w[block + "in_ln.weight"], w[block + "in_ln.bias"], eps=1e-6)
        a = a * (1 + scale) + shift
        h = h + gate * F.linear(F.silu(F.linear(a, w[block + "mlp.0.weight"], w[block + "mlp.0.bias"])),
                                w[block + "mlp.2.weight"], w[block + "mlp.2.bias"])
        j += 1
    shift, scale = F.linear(F.silu(y), w[net + "final_layer.adaLN_modulation.1.weight"],
                            w[net + "final_layer.adaLN_modulation.1.bias"]).chunk(2, -1)
    h = F.layer_norm(h, (width,), eps=1e-6) * (1 + scale) + shift
    return F.linear(h, w[net + "final_layer.linear.weight"], w[net + "final_layer.linear.bias"])


def reference_decode(w, config, chunk, cache, past):
    """SundialModel.forward on the new points `chunk` (series, time) after `past` patches held in the key-value cache
    (updated): the final hidden states of the new patches. The first patch is padded on the left with zeros, its
    mask marking them."""
    P, D, n_heads = config["input_token_len"], config["hidden_size"], config["num_attention_heads"]
    head_dim, S = D // n_heads, chunk.shape[0]
    pad = (P - chunk.shape[1] % P) % P
    points = F.pad(chunk, (pad, 0)).unfold(-1, P, P)
    mask = F.pad(torch.ones_like(chunk), (pad, 0)).unfold(-1, P, P)
    p = torch.cat([points, mask], -1)
    e = "model.embed_layer."
    h = F.linear(F.silu(F.linear(p, w[e + "hidden_layer.weight"], w[e + "hidden_layer.bias"])),
                 w[e + "output_layer.weight"], w[e + "output_layer.bias"]) \
        + F.linear(p, w[e + "residual_layer.weight"], w[e + "residual_layer.bias"])
    t = h.shape[1]
    positions = torch.arange(past, past + t)
    for i, kv in enumerate(cache):
        layer = f"model.layers.{i}."
        a = F.layer_norm(h, (D,), w[layer + "norm1.weight"], w[layer + "norm1.bias"])
        q, k, v = (F.linear(a, w[layer + f"self_attn.{p}_proj.weight"], w[layer + f"self_attn.{p}_proj.bias"])
                   .view(S, t, n_heads, head_dim).transpose(1, 2) for p in "qkv")
        q, k = rotate(q, positions, head_dim), rotate(k, positions, head_dim)
        kv[0] = k if kv[0] is None else torch.cat([kv[0], k], dim=2)
        kv[1] = v if kv[1] is None else torch.cat([kv[1], v], dim=2)
        scores = q @ kv[0].transpose(-1, -2) / math.sqrt(head_dim)
        scores = scores.masked_fill(torch.arange(past + t)[None, :] > positions[:, None], float("-inf"))
        attended = (scores.softmax(-1) @ kv[1]).transpose(1, 2).reshape(S, t, D)
        h = h + F.linear(attended, w[layer + "self_attn.o_proj.weight"])
        a = F.layer_norm(h, (D,), w[layer + "norm2.weight"], w[layer + "norm2.bias"])
        gated = F.silu(F.linear(a, w[layer + "ffn_layer.gate_proj.weight"])) \
            * F.linear(a, w[layer + "ffn_layer.up_proj.weight"])
        h = h + F.linear(gated, w[layer + "ffn_layer.down_proj.weight"])
    return F.layer_norm(h, (D,), w["model.norm.weight"], w["model.norm.bias"])


def reference_generate(w, config, seqs, horizon, noise):
    """generate(seqs, max_new_tokens=horizon, num_samples=N) of the publisher's SundialForPrediction on the weights w
    (its keys), its torch.randn returning `noise` (series, steps, N, O) step by step: (series, N, horizon) samples.
    The window is scaled by its mean and standard deviation + 1e-5 (revin) once; each step runs the new points against
    the key-value cache of all before, repeats the last hidden state N times (sample-major rows: sample s of series b
    is row s * B + b), integrates the flow from the noise in num_sampling_steps Euler steps, cuts the samples to the
    points left where the first output length exceeds them, and appends the samples' median to the sequence."""
    O, steps = config["output_token_lens"][-1], config["num_sampling_steps"]
    B, N = seqs.shape[0], noise.shape[2]
    mean, std = seqs.mean(-1, keepdim=True), seqs.std(-1, keepdim=True, unbiased=False) + 1e-5
    chunk = (seqs - mean) / std
    cache = [[None, None] for _ in range(config["num_hidden_layers"])]
    past, results, produced, step = 0, [], 0, 0
    while produced < horizon:
        h = reference_decode(w, config, chunk, cache, past)
        z = h[:, -1].repeat(N, 1)
        x0 = noise[:, step].transpose(0, 1).reshape(N * B, O)
        x = x0
        for i in range(steps):
            t = torch.ones(N * B) * i / steps
            x = x + (reference_net(w, x, t * 1000, z) - x0) * (1.0 / steps)
        samples = x.reshape(N, B, O).transpose(0, 1)
        if config["output_token_lens"][0] > horizon - produced:
            samples = samples[..., :horizon - produced]
        results.append(samples)
        produced, past, step = produced + samples.shape[-1], past + h.shape[1], step + 1
        chunk = samples.median(dim=1).values
    return torch.cat(results, -1)[..., :horizon] * std[:, None] + mean[:, None]


def series_of(x):
    """(batch, time, channels) -> (batch * channels, time): each channel a series of its own."""
    return x.transpose(1, 2).reshape(-1, x.shape[1])


def test_the_published_weights_are_loaded_key_by_key(checkpoint, weights):
    state = ours(checkpoint, 64, 8).state_dict()
    D = CONFIG["hidden_size"]
    pairs = [("embedding.hidden.weight", "model.embed_layer.hidden_layer.weight"),
             ("embedding.hidden.bias", "model.embed_layer.hidden_layer.bias"),
             ("embedding.out.weight", "model.embed_layer.output_layer.weight"),
             ("embedding.out.bias", "model.embed_layer.output_layer.bias"),
             ("embedding.residual.weight", "model.embed_layer.residual_layer.weight"),
             ("embedding.residual.bias", "model.embed_layer.residual_layer.bias"),
             ("norm.weight", "model.norm.weight"), ("norm.bias", "model.norm.bias"),
             ("head.time.0.weight", "flow_loss.net.time_embed.mlp.0.weight"),
             ("head.time.0.bias", "flow_loss.net.time_embed.mlp.0.bias"),
             ("head.time.2.weight", "flow_loss.net.time_embed.mlp.2.weight"),
             ("head.time.2.bias", "flow_loss.net.time_embed.mlp.2.bias"),
             ("head.condition.weight", "flow_loss.net.cond_embed.weight"),
             ("head.condition.bias", "flow_loss.net.cond_embed.bias"),
             ("head.input.weight", "flow_loss.net.input_proj.weight"),
             ("head.input.bias", "flow_loss.net.input_proj.bias"),
             ("head.final_modulation.weight", "flow_loss.net.final_layer.adaLN_modulation.1.weight"),
             ("head.final_modulation.bias", "flow_loss.net.final_layer.adaLN_modulation.1.bias"),
             ("head.output.weight", "flow_loss.net.final_layer.linear.weight"),
             ("head.output.bias", "flow_loss.net.final_layer.linear.bias")]
    for j in range(CONFIG["flow_loss_depth"]):
        mine, theirs = f"head.blocks.{j}.", f"flow_loss.net.res_blocks.{j}."
        for kind in ("weight", "bias"):
            pairs += [(mine + f"norm.{kind}", theirs + f"in_ln.{kind}"),
                      (mine + f"mlp.0.{kind}", theirs + f"mlp.0.{kind}"),
                      (mine + f"mlp.2.{kind}", theirs + f"mlp.2.{kind}"),
                      (mine + f"modulation.{kind}", theirs + f"adaLN_modulation.1.{kind}")]
    fused = set()
    for i in range(CONFIG["num_hidden_layers"]):
        mine, theirs = f"layers.{i}.", f"model.layers.{i}."
        for kind in ("weight", "bias"):
            for j, p in enumerate("qkv"):  # q, k, v: one fused projection, in that order
                assert torch.equal(state[mine + f"attention.qkv.{kind}"][j * D:(j + 1) * D],
                                   weights[theirs + f"self_attn.{p}_proj.{kind}"])
            fused.add(mine + f"attention.qkv.{kind}")
            pairs += [(mine + f"{norm}.{kind}", theirs + f"{norm}.{kind}") for norm in ("norm1", "norm2")]
        pairs += [(mine + "attention.out.weight", theirs + "self_attn.o_proj.weight"),
                  (mine + "ffn.gate.weight", theirs + "ffn_layer.gate_proj.weight"),
                  (mine + "ffn.up.weight", theirs + "ffn_layer.up_proj.weight"),
                  (mine + "ffn.down.weight", theirs + "ffn_layer.down_proj.weight")]
    for mine, theirs in pairs:
        assert torch.equal(state[mine], weights[theirs]), (mine, theirs)
    # every published tensor is in the model, and the model holds nothing else
    assert {m for m, _ in pairs} | fused == set(state)
    assert sum(t.numel() for t in state.values()) == sum(t.numel() for t in weights.values())


@pytest.mark.parametrize("seq_len,horizon", [(64, 5), (64, 16), (61, 24), (64, 40), (13, 20)])
def test_the_samples_are_the_publishers_generate_given_the_same_noise(checkpoint, weights, seq_len, horizon):
    """Within one head (cut: 5; whole: 16), beyond it (24 = 16 + 8, 40 = 16 + 16 + 8: the samples' median fed back,
    the rollout's last step cut) and from windows that are not whole patches (61, 13: the first patch padded on the
    left); the point forecast is the samples' mean, the quantiles theirs."""
    torch.manual_seed(1)
    x = torch.randn(2, seq_len, 3).cumsum(1) * 3 + 10  # (batch, time, channels): series with a level and a scale
    levels = "0.1,0.25,0.5,0.75,0.9"
    model = ours(checkpoint, seq_len, horizon)
    wide = ours(checkpoint, seq_len, horizon, n_outputs=5, quantile_levels=levels)
    series = series_of(x)
    noise = model.noise(series, -(-horizon // 16))
    assert noise.shape == (6, -(-horizon // 16), 5, 16)
    expected = reference_generate(weights, CONFIG, series, horizon, noise)
    with torch.no_grad():
        torch.testing.assert_close(model.samples(series), expected, rtol=1e-5, atol=1e-4)
        point, quantiles = model(x), wide(x)
    torch.testing.assert_close(point, expected.mean(1).reshape(2, 3, horizon).transpose(1, 2), rtol=1e-5, atol=1e-4)
    q = torch.quantile(expected, torch.tensor([float(v) for v in levels.split(",")]), dim=1)  # (k, series, horizon)
    torch.testing.assert_close(quantiles, q.permute(1, 2, 0).reshape(2, 3, horizon, 5).transpose(1, 2),
                               rtol=1e-5, atol=1e-4)


def test_each_series_draws_its_own_noise_whatever_its_batch_and_the_global_random_state(checkpoint):
    """Under DDP a window lands in any batch, on any rank: its samples come from its own values alone (and
    noise_seed), never from the global random state, which a forecast leaves as it found it."""
    model = ours(checkpoint, 40, 24)
    x = torch.randn(4, 40, 3).cumsum(1)
    series, others = series_of(x), torch.randn(5, 40)
    state = torch.get_rng_state()
    with torch.no_grad():
        together = model.samples(series)
        alone = model.samples(series[7:8])
        reordered = model.samples(series.flip(0))
        elsewhere = model.samples(torch.cat([others, series[7:8]]))
        forecast = model(x)
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(model.noise(series[7:8], 2), model.noise(series, 2)[7:8])  # bit for bit
    # the samples: up to the rounding of a batch of another size (the CPU's matrix products block by it)
    torch.testing.assert_close(alone[0], together[7], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(elsewhere[-1], together[7], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(reordered.flip(0), together, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(model(x[[2, 0]]), forecast[[2, 0]], rtol=1e-5, atol=1e-5)
    # the stream is the series' own: another value, or another noise_seed, gives other noise
    changed = series[7:8].clone()
    changed[0, 3] += 1e-3
    assert not torch.equal(model.noise(changed, 1), model.noise(series[7:8], 1))
    assert not torch.equal(ours(checkpoint, 40, 24, noise_seed=1).noise(series[7:8], 1), model.noise(series[7:8], 1))
    # a longer horizon continues the stream: the shorter forecast is its beginning
    with torch.no_grad():
        torch.testing.assert_close(ours(checkpoint, 40, 5).samples(series), together[..., :5], rtol=0, atol=0)
    assert model.noise(series, 2)[:, 1].std() > 0.5 and not torch.equal(together[:, 0], together[:, 1])


def reference_flow_loss(w, config, window, replicas):
    """The publisher's flow-matching loss (FlowLoss.forward) on the window (series, time), scaled as generate scales
    it: every patch's hidden state against the next O points of the window after it (those beyond masked),
    patches with none left out; rows (replica, series, patch); the noise drawn first, then the times."""
    P, O = config["input_token_len"], config["output_token_lens"][-1]
    mean, std = window.mean(-1, keepdim=True), window.std(-1, keepdim=True, unbiased=False) + 1e-5
    scaled = (window - mean) / std
    cache = [[None, None] for _ in range(config["num_hidden_layers"])]
    hidden = reference_decode(w, config, scaled, cache, 0)
    L, pad = scaled.shape[1], (P - scaled.shape[1] % P) % P
    targets, masks, conditions = [], [], []
    for b in range(scaled.shape[0]):
        for j in range(hidden.shape[1]):
            end = (j + 1) * P - pad
            if end >= L:
                continue
            target = torch.zeros(O)
            target[:min(O, L - end)] = scaled[b, end:end + O]
            targets.append(target)
            masks.append((torch.arange(O) < L - end).float())
            conditions.append(hidden[b, j])
    target = torch.stack(targets).repeat(replicas, 1)
    mask, z = torch.stack(masks).repeat(replicas, 1), torch.stack(conditions).repeat(replicas, 1)
    noise = torch.randn_like(target)
    t = torch.rand(target.shape[0])
    predicted = reference_net(w, t[:, None] * target + (1 - t[:, None]) * noise, t * 1000, z)
    return (mask / torch.arange(1, O + 1) * (predicted - target) ** 2).sum(-1).mean()


def test_training_returns_the_forecast_with_gradients_and_the_publishers_flow_matching_loss(checkpoint, weights):
    model = ours(checkpoint, 45, 24, flow_loss_weight=0.5)
    x = torch.randn(2, 45, 3).cumsum(1) * 2 + 1
    with torch.no_grad():
        evaluated = model(x)
    torch.manual_seed(3)
    out, terms = model.train()(x)
    assert set(terms) == {"flow"}
    torch.testing.assert_close(out, evaluated, rtol=0, atol=0)  # the same forecast: the same noise, no dropout
    torch.manual_seed(3)
    expected = reference_flow_loss(weights, CONFIG, series_of(x), CONFIG["diffusion_batch_mul"])
    torch.testing.assert_close(terms["flow"], 0.5 * expected, rtol=1e-5, atol=1e-6)
    # the framework's loss on the forecast alone reaches every parameter through the Euler steps of the samples
    (out - x.mean()).square().mean().backward(retain_graph=True)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
               for p in model.parameters())
    model.zero_grad()
    terms["flow"].backward()  # and so does the flow-matching term (the head's input map and all)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    with torch.no_grad():
        assert torch.isfinite(model.eval()(torch.ones(1, 45, 3))).all()  # a flat window: std 0 + 1e-5
    _, terms = ours(checkpoint, 45, 24, flow_loss_weight=0.0).train()(x)
    assert terms["flow"] == 0


def test_the_architecture_comes_from_the_checkpoint(checkpoint, tmp_path):
    found = models.model_class("sundial").published(str(checkpoint))
    assert found.hparams == {"d_model": 16, "n_heads": 2, "e_layers": 2, "d_ff": 24, "patch_len": 8, "horizon": 16,
                             "flow_layers": 2}
    assert found.task == {} and found.max_seq_len is None
    assert found.defaults == {"dropout": 0.0, "flow_steps": 6, "flow_replicas": 2}
    assert models.model_class("sundial").published(str(checkpoint / "model.safetensors")) == found  # or its file
    (tmp_path / "config.json").write_text(json.dumps(BASE_128M))
    base = models.model_class("sundial").published(str(tmp_path))
    defaults = {f.name: f.default for f in models.hyperparameter_fields(models.model_class("sundial"))}
    assert {**defaults, **base.hparams, **base.defaults} == defaults  # the defaults are sundial-base-128m's
    with torch.device("meta"):
        model = models.build("sundial", {"seq_len": 2880, "output_token_len": 720, "enc_in": 1, "covariate": False},
                             defaults)
    assert 128e6 < sum(p.numel() for p in model.parameters()) < 129e6


def test_a_missing_unexpected_or_misshapen_tensor_is_refused_naming_it(tmp_path):
    weights = random_weights(CONFIG)
    del weights["flow_loss.net.res_blocks.1.adaLN_modulation.1.bias"]
    folder = write_checkpoint(tmp_path / "missing", weights=weights)
    with pytest.raises(ValueError, match="missing flow_loss.net.res_blocks.1.adaLN_modulation.1.bias"):
        ours(folder, 64, 8)
    weights = {**random_weights(CONFIG), "model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(4)}
    folder = write_checkpoint(tmp_path / "unexpected", weights=weights)
    with pytest.raises(ValueError, match="unexpected model.layers.0.self_attn.rotary_emb.inv_freq"):
        ours(folder, 64, 8)
    weights = {**random_weights(CONFIG), "model.embed_layer.hidden_layer.weight": torch.zeros(24, 8)}
    folder = write_checkpoint(tmp_path / "shape", weights=weights)
    with pytest.raises(ValueError, match=r"hidden_layer.weight \(24, 8\) do not fit this model's "
                                         r"embedding.hidden.weight \(24, 16\)"):
        ours(folder, 64, 8)
    model_class = models.model_class("sundial")
    hparams = {f.name: f.default for f in models.hyperparameter_fields(model_class)}
    model = models.build("sundial", {"seq_len": 64, "output_token_len": 8, "enc_in": 1, "covariate": False},
                         {**hparams, **model_class.published(str(folder)).hparams, "n_heads": 4})
    with pytest.raises(ValueError, match=r"architecture is not this model's: n_heads 2 \(this model's 4\)"):
        model.load_published(str(tmp_path / "missing"))  # every shape fits: the heads show in none
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="weights in model.safetensors; found no such file"):
        ours(folder, 64, 8)


def test_a_path_that_is_not_a_sundial_checkpoint_is_refused_naming_what_it_is(tmp_path):
    published = models.model_class("sundial").published
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="expected a Sundial checkpoint .*found a folder of model.safetensors"):
        published(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "timer", "input_token_len": 96}))
    with pytest.raises(ValueError, match="expected a Sundial checkpoint .*found model_type 'timer'"):
        published(str(tmp_path))
    for change, named in [({"hidden_act": "gelu"}, "hidden_act silu .*found 'gelu'"),
                          ({"use_cache": False}, "use_cache true"),
                          ({"output_token_lens": [12]}, r"multiple of input_token_len 8 .*found \[12\]"),
                          ({"output_token_lens": []}, r"a list of positive lengths; found \[\]")]:
        (tmp_path / "config.json").write_text(json.dumps({**CONFIG, **change}))
        with pytest.raises(ValueError, match=named):
            published(str(tmp_path))
