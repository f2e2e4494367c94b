import json
import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, Published, d_ff, d_model, dropout, e_layers, hparam, n_heads
from models.layers.batch_stats import BatchMean
from models.layers.outputs import channels_last, split_points
from models.layers.published import read_config
from models.layers.transformer import MultiHeadAttention, SwiGLU, init_linear, rotary_tables

INIT_STD = 0.02  # official initializer_range: every Linear weight ~ N(0, 0.02), biases 0
RMS_EPS = 1e-6  # official rms_norm_eps
ROPE_THETA = 10000  # official rope_theta, rotary_tables' base
CHECKPOINT = "a Time-MoE checkpoint (TimeMoeForPrediction)"


class TokenEmbedding(nn.Module):
    """Official point-wise SwiGLU embedding silu(gate(x)) * value(x), here of a token's input_token_len points."""

    def __init__(self, token_len: int, d_model: int):
        super().__init__()
        self.gate = nn.Linear(token_len, d_model, bias=False)
        self.value = nn.Linear(token_len, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.gate(x)) * self.value(x)


class SparseExperts(nn.Module):
    """Top-k softmax routing over SwiGLU experts of width d_ff // k (weights not renormalised over the k, as the
    official norm_topk_prob=False), plus a shared SwiGLU expert of width d_ff scaled by a sigmoid gate."""

    def __init__(self, d_model: int, d_ff: int, num_experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(d_model, num_experts, bias=False)
        self.experts = nn.ModuleList(SwiGLU(d_model, d_ff // top_k) for _ in range(num_experts))
        self.shared = SwiGLU(d_model, d_ff)
        self.shared_gate = nn.Linear(d_model, 1, bias=False)

    def forward(self, x: torch.Tensor):
        """x (T, D) tokens -> output (T, D), router probabilities (T, E), chosen experts (T, k)."""
        probs = self.router(x).float().softmax(-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = weights.to(x.dtype)
        routed = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == i)  # only the tokens routed to expert i are computed
            routed.index_add_(0, token, expert(x[token]) * weights[token, slot, None])
        return routed + torch.sigmoid(self.shared_gate(x)) * self.shared(x), probs, chosen


class DecoderLayer(nn.Module):
    """Pre-RMSNorm decoder layer: x + attention(norm(x)) with causal rotary attention; then x + MoE(norm(x))."""

    def __init__(self, configs):
        super().__init__()
        d = configs.d_model
        self.norm1, self.norm2 = nn.RMSNorm(d, eps=RMS_EPS), nn.RMSNorm(d, eps=RMS_EPS)
        # dropout acts on the attention weights, as the official attention_dropout
        self.attention = MultiHeadAttention(d, configs.n_heads, configs.dropout)
        self.attention.out = nn.Linear(d, d, bias=False)  # the official o_proj has no bias (q, k, v have)
        self.ffn = SparseExperts(d, configs.d_ff, configs.num_experts, configs.num_experts_per_tok)

    def forward(self, h: torch.Tensor, rotary):
        h = h + self.attention(self.norm1(h), rotary=rotary, is_causal=True)
        out, probs, chosen = self.ffn(self.norm2(h).flatten(0, 1))
        return h + out.view_as(h), probs, chosen


class Model(nn.Module):
    """Time-MoE: a decoder-only Transformer whose feed-forward blocks are sparse mixtures of experts, trained
    on next-token prediction with several output heads of different horizons and rolled out autoregressively.

    Shi, Wang, Nie, Li, Ye, Wen, Jin. "Time-MoE: Billion-Scale Time Series Foundation Models with Mixture of
    Experts." ICLR 2025. https://arxiv.org/abs/2409.16040 - code: https://github.com/Time-MoE/Time-MoE
    (time_moe/models/modeling_time_moe.py, configuration_time_moe.py, ts_generation_mixin.py).

    Channel-independent (Time-MoE is univariate): each channel is its own sequence of tokens. A token's points
    are embedded by a SwiGLU map; e_layers pre-RMSNorm layers of causal self-attention with rotary position
    embedding and a sparse MoE (top-k of num_experts SwiGLU experts of width d_ff // k, plus a sigmoid-gated
    shared expert of width d_ff) follow, then a final RMSNorm and bias-free linear heads. The main head
    predicts the output_token_len points after every token (what the framework scores and rolls out); each
    extra head of `horizons` predicts the next h points after every token, in training only.

    Published checkpoints (--pretrained: a folder of the official TimeMoeForPrediction's save_pretrained, such
    as Maple728/TimeMoE-50M and -200M) are read with --no-main_head, which published() sets: the heads are then
    `horizons` alone, in the checkpoint's order (its lm_heads), and the output_token_len points after the last
    token are generated as the official generate(inputs, max_new_tokens=output_token_len) does: the decoder runs
    over the sequence so far, the last token's prediction of the first head in `horizons` order, or of the last
    one before the first head longer than the points still missing, is cut to those and appended, until
    output_token_len points exist. Each pass recomputes the whole sequence (what the official KV cache computes
    in parts); gradients flow through the points fed back. Every other token's output_token_len points follow
    the same head schedule along the sequence of the last pass (the window, then the forecast): its own first
    step, then the heads at the tokens that many points on, with the window's points as their context
    (teacher forcing) as far as the window reaches. In direct mode (--nonautoregressive) only the last token's
    forecast is used; with the main head the output is the main head's, as before.

    Training loss: forward returns the terms {"heads": the sum of the extra heads' MSEs on targets taken from
    x (points beyond the window masked, as the official calc_ar_loss masks them), "load_balance": aux_loss_coef
    x number of heads x the Switch-style load-balancing loss}. With the framework's MSE of the main head
    (weight 1) the total is the official loss (mean of the head losses + 0.02 x balance) times the number of
    heads, which Adam does not see (up to its eps). Load balancing as the official load_balancing_loss_func:
    num_experts x sum_i f_i P_i, where f_i is the share of tokens that have expert i among their top k (summed
    over the k slots, so it sums to k; no gradient: a BatchMean, exact under DDP) and P_i the mean router
    probability of expert i, both averaged over all layers' tokens. Without the main head, every head of
    `horizons` counts in "heads" on the window's tokens, the framework's loss on the generated output counts as
    one more head, and load balancing covers the tokens of the last pass.

    Official sizes (paper Table 1): base 12 layers, 12 heads, d_model 384, d_ff (intermediate_size) 1536,
    8 experts, top-2, 50M activated / 113M total parameters; large d_model 768, d_ff 3072 (200M / 453M);
    ultra 36 layers, 16 heads, d_model 1024, d_ff 4096 (1.1B / 2.4B); routed experts of width d_ff // top-k
    (the official code) reproduce these counts. Pre-trained with point tokens and heads 1, 8, 32, 64. The
    defaults here are a from-scratch size for ETTh1 on CPU: d_model 64, 4 heads, 2 layers, d_ff 256
    (0.54M parameters, 0.24M active, at input_token_len 16 and output_token_len 96).

    Deviations from the official code: MSE replaces the Huber loss (delta 2); tokens of input_token_len
    points (official: 1 point) and, by default, a main head of output_token_len points, which the framework
    rolls out (the official generate picks the longest head within the remaining horizon: --no-main_head);
    no in-model normalisation (the framework's per-dataset scaling, as the official benchmark evaluation); the
    main head's loss is the framework's, on all its targets, also those beyond the window that the official
    loss masks; the load-balancing loss ignores no padding (the framework has none); no KV cache; the rotary
    frequencies theta^(-2i/d) of the shared rotary_tables, which can differ from the official 1 / theta^(2i/d)
    in the last bit.
    """
    capabilities = Capabilities(autoregressive=True, direct=True, covariate=False, token_input=True,
                                aux_loss=True, multi_output=True)
    head_modules = ("head", "extra_heads")  # --finetune head: the main and extra heads, or the published ones

    @dataclass
    class Config:
        d_model: int = d_model(64)  # official base 384
        n_heads: int = n_heads(4)  # official 12
        e_layers: int = e_layers(2)  # official 12
        d_ff: int = d_ff(256)  # official intermediate_size 1536 (shared expert; routed experts d_ff // top-k)
        num_experts: int = hparam(8, "routed experts per MoE layer", tiny=4, low=1)
        num_experts_per_tok: int = hparam(2, "experts each token is routed to (top-k); a routed expert's "
                                             "hidden width is d_ff // this", tiny=2, low=1)
        aux_loss_coef: float = hparam(0.02, "weight of the expert load-balancing loss", low=0.0)
        horizons: str = hparam("1,8,32", "comma-separated horizons of the extra training heads (besides the "
                                         "main head of output_token_len points); empty for none", tiny="1,4")
        dropout: float = dropout(0.0)
        main_head: bool = hparam(True, "a head of output_token_len points that forecasts them in one step; "
                                       "--no-main_head (a published checkpoint's heads): the heads are `horizons` "
                                       "alone, in their order, and a forecast is generated as the official "
                                       "generate does, each step with the longest head within the points missing",
                                 later=True)

    def __init__(self, configs):
        super().__init__()
        if configs.d_model % configs.n_heads or (configs.d_model // configs.n_heads) % 2:
            raise ValueError("Time-MoE needs d_model divisible by n_heads and an even head size (rotary)")
        if not 1 <= configs.num_experts_per_tok <= configs.num_experts:
            raise ValueError("num_experts_per_tok must be between 1 and num_experts")
        if configs.d_ff < configs.num_experts_per_tok:
            raise ValueError("d_ff // num_experts_per_tok (a routed expert's width) must be at least 1")
        try:
            horizons = [int(h) for h in configs.horizons.split(",") if h.strip()]
        except ValueError:
            raise ValueError(f"horizons must be comma-separated integers, got {configs.horizons!r}") from None
        if any(h < 1 for h in horizons):
            raise ValueError(f"horizons must be positive, got {configs.horizons!r}")
        self.main_head, self.direct = configs.main_head, configs.nonautoregressive
        self.token_len, self.out_len = configs.input_token_len, configs.output_token_len
        if self.main_head:
            self.horizons = sorted(set(horizons) - {configs.output_token_len})  # the main head already has that one
        else:
            self.horizons = horizons  # in their order, as the official lm_heads
            self.steps = generation_steps(horizons, self.token_len, self.out_len, configs.n_outputs)
        self.n_outputs = configs.n_outputs
        self.d_model, self.n_heads, self.e_layers, self.d_ff = (configs.d_model, configs.n_heads, configs.e_layers,
                                                                configs.d_ff)
        self.top_k = configs.num_experts_per_tok
        self.head_dim = configs.d_model // configs.n_heads
        self.num_experts, self.aux_loss_coef = configs.num_experts, configs.aux_loss_coef
        self.embedding = TokenEmbedding(self.token_len, configs.d_model)
        self.layers = nn.ModuleList(DecoderLayer(configs) for _ in range(configs.e_layers))
        self.norm = nn.RMSNorm(configs.d_model, eps=RMS_EPS)
        if self.main_head:
            self.head = nn.Linear(configs.d_model, self.out_len * self.n_outputs, bias=False)
            self.extra_heads = nn.ModuleList(nn.Linear(configs.d_model, h, bias=False) for h in self.horizons)
        else:
            self.head = nn.ModuleList(nn.Linear(configs.d_model, h, bias=False) for h in self.horizons)
        self.routed_share = BatchMean()
        init_linear(self, INIT_STD)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None):
        B, L, C = x.shape
        series = x.transpose(1, 2).reshape(B * C, L)  # every channel its own sequence
        if self.main_head:
            h, routing = self._decode(series)
            # a channel's tokens (a direct run: its last alone), each of output_token_len points of k values, in
            # order: (B, N * output_token_len, C[, k])
            out = channels_last(split_points(self.head(h[:, -1:] if self.direct else h).reshape(B, C, -1),
                                             self.n_outputs))
            heads = zip(self.extra_heads, self.horizons)
        else:
            generated, h, routing = self._generate(series)
            out = channels_last(generated.reshape(B, C, -1))
            h = h[:, :L // self.token_len]  # the window's tokens: the heads' targets lie in x
            heads = zip(self.head, self.horizons)
        if not self.training:
            return out
        terms = {"load_balance": self.aux_loss_coef * (len(self.horizons) + 1) * self._balance(routing, B * C)}
        if self.horizons:
            terms["heads"] = sum(self._head_mse(head(h), series, horizon) for head, horizon in heads)
        return out, terms

    def _decode(self, series: torch.Tensor):
        """The final hidden states (rows, N, D) of the tokens of series (rows, N * input_token_len), and every
        layer's routing."""
        h = self.embedding(series.unfold(-1, self.token_len, self.token_len))  # (rows, N, D)
        rotary = rotary_tables(torch.arange(h.shape[1], device=series.device), self.head_dim)
        routing = []
        for layer in self.layers:
            h, probs, chosen = layer(h, rotary)
            routing.append((probs, chosen))
        return self.norm(h), routing

    def _generate(self, series: torch.Tensor):
        """The official generate without the main head: (output_token_len points after each of the N window tokens
        (rows, N, output_token_len), the last pass's hidden states, its routing). The last token's points are the
        forecast, the points each step appended: a step before the last appends its head's points whole (a
        multiple of input_token_len) and runs the decoder again. The last pass holds the hidden states the schedule
        reads for every other token. A direct run gets the forecast alone (rows, 1, output_token_len)."""
        n_tokens, context, forecast = series.shape[1] // self.token_len, series, []
        for step, (index, take) in enumerate(self.steps):
            h, routing = self._decode(context)
            forecast.append(self.head[index](h[:, -1])[:, :take])
            context = torch.cat([context, forecast[-1]], dim=1) if step + 1 < len(self.steps) else context
        if self.direct:  # the forecast alone
            return torch.cat(forecast, dim=-1)[:, None], h, routing
        points, start = [], 0
        for index, take in self.steps:  # tokens before the last: their heads at the tokens the schedule reaches
            points.append(self.head[index](h[:, start:start + n_tokens - 1])[..., :take])
            start += take // self.token_len
        return torch.cat([torch.cat(points, dim=-1), torch.cat(forecast, dim=-1)[:, None]], dim=1), h, routing

    def _balance(self, routing, n_rows: int) -> torch.Tensor:
        """num_experts x sum_i f_i P_i over the tokens of all layers (official load_balancing_loss_func)."""
        shares = torch.stack([F.one_hot(chosen, self.num_experts).sum(1).view(n_rows, -1, self.num_experts)
                              .float().mean(1) for _, chosen in routing]).mean(0)  # (rows, E), per sequence
        routed = self.routed_share(shares)
        mean_prob = torch.stack([probs.mean(0) for probs, _ in routing]).mean(0)
        return self.num_experts * (routed * mean_prob).sum()

    def _head_mse(self, pred: torch.Tensor, series: torch.Tensor, horizon: int) -> torch.Tensor:
        """MSE of pred (rows, N, horizon) against the `horizon` points after each token that lie in the window."""
        ends = self.token_len * torch.arange(1, pred.shape[1] + 1, device=series.device)
        index = ends[:, None] + torch.arange(horizon, device=series.device)  # (N, horizon)
        inside = index < series.shape[1]
        target = series[:, index.clamp(max=series.shape[1] - 1)]
        error = (pred - target).square() * inside
        return error.sum() / (inside.sum() * series.shape[0]).clamp(min=1)

    @staticmethod
    def published(path: str) -> Published:
        """The architecture in config.json of a folder saved by the official TimeMoeForPrediction."""
        found = read_config(path, CHECKPOINT)
        if found.get("model_type") != "time_moe":
            what = found.get("model_type") or found.get("architectures") or "a config.json without model_type"
            raise ValueError(f"expected {CHECKPOINT}: model_type time_moe in config.json, found {what}")
        missing = [key for key in ARCHITECTURE if key not in found]
        if missing:
            raise ValueError(f"expected {CHECKPOINT} with {', '.join(missing)} in config.json, found none")
        # what this model computes, and the official configuration's defaults where config.json leaves them out
        for key, (ours, default, why) in FIXED.items():
            value = found.get(key, default)
            if value != ours:
                raise ValueError(f"expected {key} {ours} in config.json ({why}), found {value}")
        kv_heads = found.get("num_key_value_heads") or found["num_attention_heads"]
        if kv_heads != found["num_attention_heads"]:
            raise ValueError(f"expected num_key_value_heads equal to num_attention_heads "
                             f"({found['num_attention_heads']}: no grouped-query attention here), found {kv_heads}")
        lengths = found.get("horizon_lengths", 1)
        lengths = [lengths] if isinstance(lengths, int) else list(lengths)
        hparams = {"d_model": found["hidden_size"], "n_heads": found["num_attention_heads"],
                   "e_layers": found["num_hidden_layers"], "d_ff": found["intermediate_size"],
                   "num_experts": found.get("num_experts", 1),
                   "num_experts_per_tok": found.get("num_experts_per_tok", 2),
                   "horizons": ",".join(str(h) for h in lengths), "main_head": False}
        defaults = {"dropout": found.get("attention_dropout", 0.0),
                    "aux_loss_coef": found.get("router_aux_loss_factor", 0.02) if found.get("apply_aux_loss", True)
                    else 0.0}
        return Published(hparams, task={"input_token_len": 1}, max_seq_len=found.get("max_position_embeddings", 32768),
                         defaults=defaults)

    def load_published(self, path: str) -> None:
        """Every tensor of the official TimeMoeForPrediction's state dict into this model (built from published())."""
        found = self.published(path)
        if self.main_head:
            raise ValueError("the published heads are read without the main head: build the model with main_head "
                             "False, as published() gives")
        built = {"d_model": self.d_model, "n_heads": self.n_heads, "e_layers": self.e_layers, "d_ff": self.d_ff,
                 "num_experts": self.num_experts, "num_experts_per_tok": self.top_k,
                 "horizons": ",".join(map(str, self.horizons))}
        for name, value in built.items():
            if found.hparams[name] != value:
                raise ValueError(f"the checkpoint has {name} {found.hparams[name]}, this model {value}")
        if self.token_len != 1:
            raise ValueError(f"the checkpoint reads points one at a time (input_token_len 1), this model tokens of "
                             f"{self.token_len}")
        weights = published_tensors(path)
        sources = self.published_names()
        expected = {key for keys in sources.values() for key in keys}
        missing, unexpected = sorted(expected - set(weights)), sorted(set(weights) - expected)
        if missing or unexpected:
            raise ValueError("the checkpoint's tensors are not this model's: " + "; ".join(
                f"{what} {', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''} ({len(keys)})"
                for what, keys in (("missing", missing), ("unexpected", unexpected)) if keys))
        state = self.state_dict()
        with torch.no_grad():
            for name, keys in sources.items():
                part = (state[name].shape[0] // len(keys), *state[name].shape[1:])  # q, k, v: a third each
                for key in keys:
                    if tuple(weights[key].shape) != part:
                        raise ValueError(f"the checkpoint's {key} has shape {tuple(weights[key].shape)}, this model "
                                         f"reads {part} into {name}")
                state[name].copy_(torch.cat([weights[key] for key in keys]) if len(keys) > 1 else weights[keys[0]])

    def published_names(self) -> dict:
        """Each tensor of this model's state dict -> the official state dict's keys it is made of (q, k and v
        stacked in that order in the fused qkv projection)."""
        names = {"embedding.gate.weight": ["model.embed_layer.gate_layer.weight"],
                 "embedding.value.weight": ["model.embed_layer.emb_layer.weight"],
                 "norm.weight": ["model.norm.weight"]}
        for i in range(len(self.layers)):
            ours, theirs = f"layers.{i}.", f"model.layers.{i}."
            for kind in ("weight", "bias"):
                names[f"{ours}attention.qkv.{kind}"] = [f"{theirs}self_attn.{p}_proj.{kind}" for p in "qkv"]
            names[f"{ours}attention.out.weight"] = [f"{theirs}self_attn.o_proj.weight"]
            names[f"{ours}norm1.weight"] = [f"{theirs}input_layernorm.weight"]
            names[f"{ours}norm2.weight"] = [f"{theirs}post_attention_layernorm.weight"]
            names[f"{ours}ffn.router.weight"] = [f"{theirs}ffn_layer.gate.weight"]
            names[f"{ours}ffn.shared_gate.weight"] = [f"{theirs}ffn_layer.shared_expert_gate.weight"]
            experts = [(f"experts.{e}", f"experts.{e}") for e in range(self.num_experts)]
            for mine, official in experts + [("shared", "shared_expert")]:
                for p in ("gate", "up", "down"):
                    names[f"{ours}ffn.{mine}.{p}.weight"] = [f"{theirs}ffn_layer.{official}.{p}_proj.weight"]
        for i in range(len(self.head)):
            names[f"head.{i}.weight"] = [f"lm_heads.{i}.out_layer.weight"]
        if set(names) != set(self.state_dict()):  # the mapping must cover this model exactly
            raise RuntimeError(f"published_names does not cover the model: "
                               f"{sorted(set(names) ^ set(self.state_dict()))}")
        return names


# config.json keys published() reads without a default of the official configuration to fall back on
ARCHITECTURE = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
# config.json key -> (the value this model computes with, the official configuration's default, why)
FIXED = {"input_size": (1, 1, "points of one series: the official input_size counts variables per time step"),
         "use_dense": (False, False, "sparse mixtures of experts, not a dense feed-forward block"),
         "hidden_act": ("silu", "silu", "SwiGLU blocks"),
         "rope_theta": (ROPE_THETA, 10000, "the rotary base"),
         "rms_norm_eps": (RMS_EPS, 1e-6, "the RMSNorm epsilon")}


def generation_steps(horizons: list, token_len: int, out_len: int, n_outputs: int) -> list:
    """(index of the head in `horizons`, points it adds) of each step of the official generate for out_len points:
    the first head, replaced in `horizons` order by each next head until one exceeds the points still missing,
    its points cut to those."""
    if not horizons:
        raise ValueError("without the main head the heads of `horizons` forecast: give at least one")
    if len(set(horizons)) < len(horizons):
        raise ValueError(f"without the main head each of `horizons` is a head of its own: no repeats, got {horizons}")
    if any(h % token_len for h in horizons):
        raise ValueError(f"without the main head each of horizons {horizons} is fed back: each a multiple of "
                         f"input_token_len {token_len}")
    if n_outputs != 1:
        raise ValueError("without the main head the heads forecast points: a point loss, not "
                         f"{n_outputs} values per point")
    steps, missing = [], out_len
    while missing > 0:
        index = 0
        while index + 1 < len(horizons) and horizons[index + 1] <= missing:
            index += 1
        take = min(horizons[index], missing)
        steps.append((index, take))
        missing -= take
    return steps


def published_tensors(path: str) -> dict:
    """name -> tensor of the state dict saved in the folder `path`: model.safetensors (save_pretrained's), its
    shards (model.safetensors.index.json), or pytorch_model.bin (save_safetensors=False) and its shards."""
    from safetensors.torch import load_file

    def read(file):
        try:
            if file.endswith(".safetensors"):
                return load_file(file)
            return torch.load(file, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - whatever the reader fails on, the file is not a checkpoint it reads
            raise ValueError(f"expected {CHECKPOINT}'s weights, found a {os.path.basename(file)} that cannot be "
                             f"read: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None

    for name in ("model.safetensors", "pytorch_model.bin"):
        file = os.path.join(path, name)
        if os.path.isfile(file):
            return read(file)
        if os.path.isfile(file + ".index.json"):
            with open(file + ".index.json") as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            return {key: tensor for shard in shards for key, tensor in read(os.path.join(path, shard)).items()}
    raise ValueError(f"expected {CHECKPOINT}'s weights in {path} (model.safetensors or pytorch_model.bin), found "
                     f"{', '.join(sorted(os.listdir(path))) or 'nothing'}")
