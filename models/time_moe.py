from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, d_ff, d_model, dropout, e_layers, hparam, n_heads
from models.layers.batch_stats import BatchMean
from models.layers.outputs import channels_last, split_points
from models.layers.transformer import MultiHeadAttention, rotary_tables

INIT_STD = 0.02  # official initializer_range: every Linear weight ~ N(0, 0.02), biases 0
RMS_EPS = 1e-6  # official rms_norm_eps


class SwiGLU(nn.Module):
    """Bias-free gated feed-forward block down(silu(gate(x)) * up(x)): each Time-MoE expert."""

    def __init__(self, d_in: int, d_hidden: int):
        super().__init__()
        self.gate = nn.Linear(d_in, d_hidden, bias=False)
        self.up = nn.Linear(d_in, d_hidden, bias=False)
        self.down = nn.Linear(d_hidden, d_in, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


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
    (time_moe/models/modeling_time_moe.py, configuration_time_moe.py).

    Channel-independent (Time-MoE is univariate): each channel is its own sequence of tokens. A token's points
    are embedded by a SwiGLU map; e_layers pre-RMSNorm layers of causal self-attention with rotary position
    embedding and a sparse MoE (top-k of num_experts SwiGLU experts of width d_ff // k, plus a sigmoid-gated
    shared expert of width d_ff) follow, then a final RMSNorm and bias-free linear heads. The main head
    predicts the output_token_len points after every token (what the framework scores and rolls out); each
    extra head of `horizons` predicts the next h points after every token, in training only.

    Training loss: forward returns the terms {"heads": the sum of the extra heads' MSEs on targets taken from
    x (points beyond the window masked, as the official calc_ar_loss masks them), "load_balance": aux_loss_coef
    x number of heads x the Switch-style load-balancing loss}. With the framework's MSE of the main head
    (weight 1) the total is the official loss (mean of the head losses + 0.02 x balance) times the number of
    heads, which Adam does not see (up to its eps). Load balancing as the official load_balancing_loss_func:
    num_experts x sum_i f_i P_i, where f_i is the share of tokens that have expert i among their top k (summed
    over the k slots, so it sums to k; no gradient: a BatchMean, exact under DDP) and P_i the mean router
    probability of expert i, both averaged over all layers' tokens.

    Official sizes (paper Table 1): base 12 layers, 12 heads, d_model 384, d_ff (intermediate_size) 1536,
    8 experts, top-2, 50M activated / 113M total parameters; large d_model 768, d_ff 3072 (200M / 453M);
    ultra 36 layers, 16 heads, d_model 1024, d_ff 4096 (1.1B / 2.4B); routed experts of width d_ff // top-k
    (the official code) reproduce these counts. Pre-trained with point tokens and heads 1, 8, 32, 64. The
    defaults here are a from-scratch size for ETTh1 on CPU: d_model 64, 4 heads, 2 layers, d_ff 256
    (0.54M parameters, 0.24M active, at input_token_len 16 and output_token_len 96).

    Deviations from the official code: MSE replaces the Huber loss (delta 2); tokens of input_token_len
    points (official: 1 point) and a main head of output_token_len points, which the framework rolls out
    (the official generate picks the longest head within the remaining horizon); no in-model normalisation
    (the framework's per-dataset scaling, as the official benchmark evaluation); the main head's loss is the
    framework's, on all its targets, also those beyond the window that the official loss masks; the
    load-balancing loss ignores no padding (the framework has none); no KV cache.
    """
    capabilities = Capabilities(autoregressive=True, direct=False, covariate=False, token_input=True,
                                aux_loss=True, multi_output=True)

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

    def __init__(self, configs):
        super().__init__()
        if configs.d_model % configs.n_heads or (configs.d_model // configs.n_heads) % 2:
            raise ValueError("Time-MoE needs d_model divisible by n_heads and an even head size (rotary)")
        if not 1 <= configs.num_experts_per_tok <= configs.num_experts:
            raise ValueError("num_experts_per_tok must be between 1 and num_experts")
        if configs.d_ff < configs.num_experts_per_tok:
            raise ValueError("d_ff // num_experts_per_tok (a routed expert's width) must be at least 1")
        try:
            horizons = {int(h) for h in configs.horizons.split(",") if h.strip()}
        except ValueError:
            raise ValueError(f"horizons must be comma-separated integers, got {configs.horizons!r}") from None
        if any(h < 1 for h in horizons):
            raise ValueError(f"horizons must be positive, got {configs.horizons!r}")
        self.horizons = sorted(horizons - {configs.output_token_len})  # the main head already has that one
        self.token_len, self.out_len = configs.input_token_len, configs.output_token_len
        self.n_outputs = configs.n_outputs
        self.head_dim = configs.d_model // configs.n_heads
        self.num_experts, self.aux_loss_coef = configs.num_experts, configs.aux_loss_coef
        self.embedding = TokenEmbedding(self.token_len, configs.d_model)
        self.layers = nn.ModuleList(DecoderLayer(configs) for _ in range(configs.e_layers))
        self.norm = nn.RMSNorm(configs.d_model, eps=RMS_EPS)
        self.head = nn.Linear(configs.d_model, self.out_len * self.n_outputs, bias=False)
        self.extra_heads = nn.ModuleList(nn.Linear(configs.d_model, h, bias=False) for h in self.horizons)
        self.routed_share = BatchMean()
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=INIT_STD)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None):
        B, L, C = x.shape
        series = x.transpose(1, 2).reshape(B * C, L)  # every channel its own sequence
        h = self.embedding(series.unfold(-1, self.token_len, self.token_len))  # (B*C, N, D)
        n_tokens = h.shape[1]
        rotary = rotary_tables(torch.arange(n_tokens, device=x.device), self.head_dim)
        routing = []
        for layer in self.layers:
            h, probs, chosen = layer(h, rotary)
            routing.append((probs, chosen))
        h = self.norm(h)
        # a channel's tokens, each of output_token_len points of k values, in order: (B, N * output_token_len, C[, k])
        out = channels_last(split_points(self.head(h).reshape(B, C, -1), self.n_outputs))
        if not self.training:
            return out
        terms = {"load_balance": self.aux_loss_coef * (len(self.horizons) + 1) * self._balance(routing, B * C)}
        if self.horizons:
            terms["heads"] = sum(self._head_mse(head(h), series, horizon)
                                 for head, horizon in zip(self.extra_heads, self.horizons))
        return out, terms

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
