"""Time-MoE reads a checkpoint in the layout of the official TimeMoeForPrediction (Maple728/TimeMoE-50M, -200M) and
forecasts what the official generate(inputs, max_new_tokens=H) does. The official package cannot be installed beside
this project's pins; scripts/equivalence/time_moe.py compares against it. Here a checkpoint is written by hand in its
layout, and the forecast is compared with a plain re-statement of the official network and head choice."""
import json
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

import models
from models.time_moe import generation_steps

D, N_HEADS, LAYERS, FF, EXPERTS, TOP_K = 16, 2, 2, 12, 4, 2
LENGTHS = [1, 4, 8]  # the published models have [1, 8, 32, 64]
CONFIG = {"model_type": "time_moe", "architectures": ["TimeMoeForPrediction"], "input_size": 1, "hidden_size": D,
          "intermediate_size": FF, "horizon_lengths": LENGTHS, "num_hidden_layers": LAYERS,
          "num_attention_heads": N_HEADS, "num_key_value_heads": N_HEADS, "hidden_act": "silu",
          "num_experts_per_tok": TOP_K, "num_experts": EXPERTS, "max_position_embeddings": 4096,
          "initializer_range": 0.02, "rms_norm_eps": 1e-6, "use_cache": True, "use_dense": False, "rope_theta": 10000,
          "attention_dropout": 0.1, "apply_aux_loss": True, "router_aux_loss_factor": 0.02,
          "tie_word_embeddings": False, "torch_dtype": "float32", "transformers_version": "4.40.1"}


def official_shapes() -> dict:
    """Every tensor of TimeMoeForPrediction's state dict for CONFIG, by its official name."""
    shapes = {"model.embed_layer.emb_layer.weight": (D, 1), "model.embed_layer.gate_layer.weight": (D, 1),
              "model.norm.weight": (D,)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        for n in "qkv":
            shapes[f"{p}self_attn.{n}_proj.weight"], shapes[f"{p}self_attn.{n}_proj.bias"] = (D, D), (D,)
        shapes[f"{p}self_attn.o_proj.weight"] = (D, D)
        shapes[f"{p}ffn_layer.gate.weight"] = (EXPERTS, D)
        for e in range(EXPERTS):
            shapes[f"{p}ffn_layer.experts.{e}.gate_proj.weight"] = (FF // TOP_K, D)
            shapes[f"{p}ffn_layer.experts.{e}.up_proj.weight"] = (FF // TOP_K, D)
            shapes[f"{p}ffn_layer.experts.{e}.down_proj.weight"] = (D, FF // TOP_K)
        shapes[f"{p}ffn_layer.shared_expert.gate_proj.weight"] = (FF, D)
        shapes[f"{p}ffn_layer.shared_expert.up_proj.weight"] = (FF, D)
        shapes[f"{p}ffn_layer.shared_expert.down_proj.weight"] = (D, FF)
        shapes[f"{p}ffn_layer.shared_expert_gate.weight"] = (1, D)
        shapes[f"{p}input_layernorm.weight"] = shapes[f"{p}post_attention_layernorm.weight"] = (D,)
    for i, length in enumerate(LENGTHS):
        shapes[f"lm_heads.{i}.out_layer.weight"] = (length, D)
    return shapes


def random_weights(seed: int = 0) -> dict:
    """Weights large enough that every part matters: norms near 1, routers that route tokens differently."""
    g = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in official_shapes().items():
        scale = 1.0 if "ffn_layer.gate." in name or "embed_layer" in name else 0.3
        weights[name] = torch.randn(shape, generator=g) * scale
        if "norm" in name:
            weights[name] = 1 + 0.2 * weights[name]
    return weights


def write(folder, weights, config=CONFIG, weights_file="model.safetensors"):
    """The folder save_pretrained writes: config.json and model.safetensors (or, save_safetensors=False,
    pytorch_model.bin)."""
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    weights = {k: v.contiguous() for k, v in weights.items()}
    if weights_file.endswith(".safetensors"):
        save_file(weights, str(folder / weights_file))
    else:
        torch.save(weights, folder / weights_file)
    return str(folder)


def ours(folder, seq_len=24, horizon=13, channels=2, direct=False):
    found = models.model_class("time_moe").published(folder)
    task = {"seq_len": seq_len, "output_token_len": horizon, "enc_in": channels, "covariate": False,
            "nonautoregressive": direct, **found.task}
    model = models.build("time_moe", task, {**found.hparams, **found.defaults})
    model.load_published(folder)
    return model


@pytest.fixture
def checkpoint(tmp_path):
    weights = random_weights()
    return write(tmp_path / "time-moe-tiny", weights), weights


def test_published_reads_the_architecture_from_config_json(checkpoint):
    found = models.model_class("time_moe").published(checkpoint[0])
    assert found.hparams == {"d_model": D, "n_heads": N_HEADS, "e_layers": LAYERS, "d_ff": FF, "num_experts": EXPERTS,
                             "num_experts_per_tok": TOP_K, "horizons": "1,4,8", "main_head": False}
    assert found.task == {"input_token_len": 1} and found.max_seq_len == 4096
    assert found.defaults == {"dropout": 0.1, "aux_loss_coef": 0.02}


@pytest.mark.parametrize("weights_file,dtype", [("model.safetensors", torch.float32),
                                                ("model.safetensors", torch.bfloat16),  # as published: upcast
                                                ("pytorch_model.bin", torch.float32)])
def test_every_published_tensor_lands_in_its_parameter(tmp_path, weights_file, dtype):
    weights = {name: tensor.to(dtype) for name, tensor in random_weights().items()}
    model = ours(write(tmp_path / "checkpoint", weights, weights_file=weights_file))
    weights = {name: tensor.float() for name, tensor in weights.items()}
    state = model.state_dict()
    expected = {"embedding.value.weight": "model.embed_layer.emb_layer.weight",
                "embedding.gate.weight": "model.embed_layer.gate_layer.weight", "norm.weight": "model.norm.weight"}
    for i in range(LAYERS):
        p, q = f"layers.{i}.", f"model.layers.{i}."
        for kind in ("weight", "bias"):  # the fused projection holds q, k, v in that order
            fused = state[f"{p}attention.qkv.{kind}"]
            for j, n in enumerate("qkv"):
                assert torch.equal(fused[j * D:(j + 1) * D], weights[f"{q}self_attn.{n}_proj.{kind}"])
        expected.update({f"{p}attention.out.weight": f"{q}self_attn.o_proj.weight",
                         f"{p}norm1.weight": f"{q}input_layernorm.weight",
                         f"{p}norm2.weight": f"{q}post_attention_layernorm.weight",
                         f"{p}ffn.router.weight": f"{q}ffn_layer.gate.weight",
                         f"{p}ffn.shared_gate.weight": f"{q}ffn_layer.shared_expert_gate.weight"})
        for part in ("gate", "up", "down"):
            expected[f"{p}ffn.shared.{part}.weight"] = f"{q}ffn_layer.shared_expert.{part}_proj.weight"
            for e in range(EXPERTS):
                expected[f"{p}ffn.experts.{e}.{part}.weight"] = f"{q}ffn_layer.experts.{e}.{part}_proj.weight"
    for i in range(len(LENGTHS)):
        expected[f"head.{i}.weight"] = f"lm_heads.{i}.out_layer.weight"
    assert set(expected) | {f"layers.{i}.attention.qkv.{k}" for i in range(LAYERS) for k in ("weight", "bias")} \
        == set(state)
    for name, official in expected.items():
        assert torch.equal(state[name], weights[official]), name


@pytest.mark.parametrize("change,named", [
    (lambda w: w.pop("model.layers.1.ffn_layer.experts.3.up_proj.weight"), "missing model.layers.1.ffn_layer."
                                                                           "experts.3.up_proj.weight"),
    (lambda w: w.__setitem__("lm_heads.3.out_layer.weight", torch.zeros(64, D)), "unexpected lm_heads.3.out_layer"),
    (lambda w: w.__setitem__("model.layers.0.self_attn.q_proj.weight", torch.zeros(D, D + 1)),
     "model.layers.0.self_attn.q_proj.weight"),
])
def test_a_checkpoint_with_other_tensors_is_refused_naming_them(tmp_path, change, named):
    weights = random_weights()
    change(weights)
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        ours(write(tmp_path / "broken", weights))


@pytest.mark.parametrize("config,named", [
    ({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]}, "found t5"),
    ({**CONFIG, "use_dense": True}, "use_dense False .* found True"),
    ({**CONFIG, "num_key_value_heads": 1}, "num_key_value_heads .* found 1"),
    ({**CONFIG, "input_size": 3}, "input_size 1 .* found 3"),
    ({**CONFIG, "rope_theta": 500000}, "rope_theta 10000 .* found 500000"),
])
def test_a_folder_of_another_model_is_refused_naming_what_it_found(tmp_path, config, named):
    folder = write(tmp_path / "other", random_weights(), config)
    with pytest.raises(ValueError, match=named):
        models.model_class("time_moe").published(folder)


def test_a_folder_without_config_json_is_refused(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="expected a Time-MoE checkpoint .* found a folder of model.safetensors"):
        models.model_class("time_moe").published(str(tmp_path))


def test_weights_that_cannot_be_read_are_refused_naming_the_file(tmp_path):
    folder = write(tmp_path / "no-weights", random_weights())
    (tmp_path / "no-weights" / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="model.safetensors or pytorch_model.bin.* found config.json"):
        ours(folder)
    (tmp_path / "no-weights" / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="found a model.safetensors that cannot be read"):
        ours(folder)


def test_the_head_schedule_is_the_official_choice():
    """The first head, then each next one in order while it fits in the points missing; cut to those."""
    assert generation_steps([1, 4, 8], 1, 13, 1) == [(2, 8), (1, 4), (0, 1)]
    assert generation_steps([1, 8, 32, 64], 1, 96, 1) == [(3, 64), (2, 32)]
    assert generation_steps([1, 8, 32, 64], 1, 7, 1) == [(0, 1)] * 7
    assert generation_steps([4, 8], 1, 3, 1) == [(0, 3)]  # no head fits: the first, cut
    # in their order, as the official loop: 8 fits 13 and 9, then 8 > 5 ends the search at the first head
    assert generation_steps([1, 8, 4], 1, 13, 1) == [(2, 4)] * 2 + [(0, 1)] * 5


# ---- a plain re-statement of the official network (modeling_time_moe.py) and of its generate's head choice ----

def official_hidden(w: dict, x: torch.Tensor) -> torch.Tensor:
    """Final hidden states (rows, T, D) of TimeMoeModel for point sequences x (rows, T), eager attention."""
    rows, T = x.shape
    hd = D // N_HEADS

    def rms(h, key):
        return w[key] * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6))

    def block(h, p):  # TimeMoeTemporalBlock
        gated = F.silu(h @ w[p + "gate_proj.weight"].T) * (h @ w[p + "up_proj.weight"].T)
        return gated @ w[p + "down_proj.weight"].T

    points = x[..., None]
    embed = "model.embed_layer."
    h = F.silu(points @ w[embed + "gate_layer.weight"].T) * (points @ w[embed + "emb_layer.weight"].T)
    inv_freq = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
    angles = torch.outer(torch.arange(T).float(), inv_freq)
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()

    def rotate(t):  # t * cos + rotate_half(t) * sin, over the whole head
        return t * cos + torch.cat([-t[..., hd // 2:], t[..., :hd // 2]], -1) * sin

    causal = torch.full((T, T), float("-inf")).triu(1)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        a = rms(h, p + "input_layernorm.weight")
        q, k, v = ((a @ w[f"{p}self_attn.{n}_proj.weight"].T + w[f"{p}self_attn.{n}_proj.bias"])
                   .view(rows, T, N_HEADS, hd).transpose(1, 2) for n in "qkv")
        weights = (rotate(q) @ rotate(k).transpose(2, 3) / math.sqrt(hd) + causal).softmax(-1)
        h = h + (weights @ v).transpose(1, 2).reshape(rows, T, D) @ w[p + "self_attn.o_proj.weight"].T
        a = rms(h, p + "post_attention_layernorm.weight").reshape(rows * T, D)
        probs = F.softmax(a @ w[p + "ffn_layer.gate.weight"].T, dim=1, dtype=torch.float)
        top, chosen = probs.topk(TOP_K, dim=-1)  # not renormalised (norm_topk_prob False)
        every = torch.stack([block(a, f"{p}ffn_layer.experts.{e}.") for e in range(EXPERTS)], 1)  # (tokens, E, D)
        routed = (every.gather(1, chosen[..., None].expand(-1, -1, D)) * top[..., None]).sum(1)
        shared = (torch.sigmoid(a @ w[p + "ffn_layer.shared_expert_gate.weight"].T)
                  * block(a, p + "ffn_layer.shared_expert."))
        h = h + (routed + shared).view(rows, T, D)
    return rms(h, "model.norm.weight")


def official_generate(w: dict, x: torch.Tensor, horizon: int):
    """generate(x, max_new_tokens=horizon)[:, -horizon:] and the head lengths it used, step by step."""
    sequence, used = x, []
    while sequence.shape[1] < x.shape[1] + horizon:
        missing = x.shape[1] + horizon - sequence.shape[1]
        length = LENGTHS[0]
        for candidate in LENGTHS[1:]:
            if candidate > missing:
                break
            length = candidate
        used.append(length)
        prediction = official_hidden(w, sequence)[:, -1] @ w[f"lm_heads.{LENGTHS.index(length)}.out_layer.weight"].T
        sequence = torch.cat([sequence, prediction[:, :missing]], dim=1)
    return sequence[:, x.shape[1]:], used


@pytest.mark.parametrize("horizon,used", [(13, [8, 4, 1]), (8, [8]), (3, [1, 1, 1]), (20, [8, 8, 4])])
def test_the_direct_forecast_is_the_official_generate(checkpoint, horizon, used):
    folder, weights = checkpoint
    model = ours(folder, horizon=horizon).eval()
    torch.manual_seed(1)
    x = torch.randn(3, 24, 2)  # (batch, time, channels): each channel a series of its own
    with torch.no_grad():
        out = model(x)
        reference, steps = official_generate(weights, x.transpose(1, 2).reshape(6, 24), horizon)
        direct = ours(folder, horizon=horizon, direct=True).eval()(x)
    assert steps == used
    assert out.shape == (3, 24 * horizon, 2)  # autoregressive: one output token per input token
    assert direct.shape == (3, horizon, 2)  # a direct run: the forecast alone
    torch.testing.assert_close(direct, out[:, -horizon:])
    forecast = direct.transpose(1, 2).reshape(6, horizon)
    torch.testing.assert_close(forecast, reference, rtol=1e-5, atol=1e-5)


def test_earlier_tokens_follow_the_schedule_along_the_window(checkpoint):
    """Token t's 13 points: the 8-head at t, the 4-head 8 points on, the 1-head 12 points on, with the window's
    points as context (what the official training gives every head)."""
    folder, weights = checkpoint
    model = ours(folder, horizon=13, channels=1).eval()
    x = torch.randn(1, 24, 1)
    with torch.no_grad():
        out = model(x).view(24, 13)
        hidden = official_hidden(weights, x[..., 0])[0]
    t = 5
    expected = torch.cat([hidden[t] @ weights["lm_heads.2.out_layer.weight"].T,
                          hidden[t + 8] @ weights["lm_heads.1.out_layer.weight"].T,
                          hidden[t + 12] @ weights["lm_heads.0.out_layer.weight"].T])
    torch.testing.assert_close(out[t], expected, rtol=1e-5, atol=1e-5)


def test_training_through_the_generated_forecast_reaches_every_head(checkpoint):
    model = ours(checkpoint[0], horizon=13).train()
    out, terms = model(torch.randn(2, 24, 2))
    assert set(terms) == {"load_balance", "heads"} and all(torch.isfinite(t) for t in terms.values())
    out[:, -13:].square().mean().backward()  # the direct-mode loss alone
    for i in range(len(LENGTHS)):
        assert model.head[i].weight.grad.abs().sum() > 0
    assert model.embedding.value.weight.grad.abs().sum() > 0


def test_without_the_main_head_the_heads_must_be_fed_back_in_whole_tokens():
    task = {"seq_len": 32, "input_token_len": 4, "output_token_len": 10, "enc_in": 1, "covariate": False}
    hparams = {**{f.name: f.default for f in models.hyperparameter_fields(models.model_class("time_moe"))},
               "horizons": "4,8", "main_head": False, "d_model": 16, "n_heads": 2, "d_ff": 16}
    model = models.build("time_moe", task, hparams).eval()  # tokens of 4 points: 8, then 2 of the 4-head
    assert model.steps == [(1, 8), (0, 2)] and model(torch.randn(2, 32, 1)).shape == (2, 8 * 10, 1)
    with pytest.raises(ValueError, match="multiple of input_token_len 4"):
        models.build("time_moe", task, {**hparams, "horizons": "1,8"})
    with pytest.raises(ValueError, match="a point loss"):
        models.build("time_moe", {**task, "n_outputs": 3}, hparams)
