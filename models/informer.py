import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, activation, d_ff, d_model, dropout, hparam, label_len, n_heads
from models.layers.embed import DataEmbedding
from models.layers.outputs import split_points
from models.layers.seasonal_trend import HeadMixing
from models.layers.transformer import EncoderLayer

EVAL_SEED = 0  # seed of the keys ProbSparse attention samples in eval mode (see Model)


def probsparse_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, factor: int,
                         causal: bool) -> torch.Tensor:
    """ProbSparse attention of (B, H, L, E) queries, keys and values; returns (B, H, L_Q, E).

    The u = factor * ceil(ln L_Q) queries with the largest sparsity measurement (max minus sum / L_K of their
    scores against factor * ceil(ln L_K) keys drawn at random per query) attend to all keys; every other query
    gets the mean of the values (the running sum with `causal`, as the official code). Scores are one dense
    Q K^T product from which the sampled and the selected entries are gathered: the official values, without
    materialising a (B, H, L_Q, sample, E) copy of the keys.
    """
    B, H, L_Q, E = q.shape
    L_K = k.shape[2]
    n_sample = max(min(factor * math.ceil(math.log(L_K)), L_K), 1)  # one key: ln 1 = 0 would sample none
    n_top = min(factor * math.ceil(math.log(L_Q)), L_Q)
    scores = q @ k.transpose(-2, -1)
    # the official draw: torch's global CPU generator, the same sampled keys for every batch element and head
    sample = torch.randint(L_K, (L_Q, n_sample)).to(q.device)
    with torch.no_grad():  # the measurement only picks queries
        sampled = scores.gather(-1, sample.expand(B, H, L_Q, n_sample))
        sparsity = sampled.amax(-1) - sampled.sum(-1) / L_K
        top = sparsity.topk(n_top, dim=-1, sorted=False).indices[..., None]  # (B, H, u, 1)
    top_scores = scores.gather(2, top.expand(B, H, n_top, L_K)) * (1.0 / math.sqrt(E))
    if causal:
        top_scores = top_scores.masked_fill(torch.arange(L_K, device=q.device) > top, float("-inf"))
    context = v.cumsum(2) if causal else v.mean(2, keepdim=True).expand(B, H, L_Q, v.shape[-1])
    attended = torch.softmax(top_scores, dim=-1) @ v
    # CUDA's autocast keeps the running sum in float32 and the product in half precision
    return context.scatter(2, top.expand(B, H, n_top, v.shape[-1]), attended.to(context.dtype))


class Attention(nn.Module):
    """Informer's attention between the heads HeadMixing projects (B, L, H, E): ProbSparse ("prob") or softmax
    attention ("full", attention weights dropped out as the official FullAttention), heads merged back to
    (B, L_Q, H * E).

    mix: merge heads in (head, time) memory order, as the official decoder self-attention (`--mix`, its default)
    and the TSLib port's every ProbSparse layer do: a row of the merged output then holds several time steps
    of one head.
    """

    def __init__(self, kind: str, factor: int, dropout: float, causal: bool, mix: bool):
        super().__init__()
        self.kind, self.factor, self.dropout, self.causal, self.mix = kind, factor, dropout, causal, mix

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        B, L, H, E = q.shape
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.kind == "prob":
            out = probsparse_attention(q, k, v, self.factor, self.causal)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal,
                                                 dropout_p=self.dropout if self.training else 0.0)
        return (out if self.mix else out.transpose(1, 2)).reshape(B, L, H * E)


class Layer(EncoderLayer):
    """The shared post-norm layer (feed-forward, LayerNorms, dropout) with Informer's attention in place of its
    own, and in the decoder a cross-attention sublayer (with its LayerNorm) between the two."""

    def __init__(self, configs, self_attention: Attention, cross_attention: Attention | None = None):
        super().__init__(configs.d_model, configs.n_heads, configs.d_ff, configs.dropout, configs.activation)
        # replaces the shared layer's SDPA attention
        self.attention = HeadMixing(self_attention, configs.d_model, configs.n_heads)
        self.cross_attention = self.norm_cross = None
        if cross_attention is not None:
            self.cross_attention = HeadMixing(cross_attention, configs.d_model, configs.n_heads)
            self.norm_cross = nn.LayerNorm(configs.d_model)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, x, x)))
        if self.cross_attention is not None:
            x = self.norm_cross(x + self.dropout(self.cross_attention(x, memory, memory)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class Distilling(nn.Module):
    """Self-attention distilling between encoder layers: width-3 circular convolution, BatchNorm, ELU, then
    max-pooling with stride 2 halves the sequence."""

    def __init__(self, d_model: int, padding: int):
        super().__init__()
        self.conv = nn.Conv1d(d_model, d_model, kernel_size=3, padding=padding, padding_mode="circular")
        self.norm = nn.BatchNorm1d(d_model)
        self.pool = nn.MaxPool1d(kernel_size=3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, L, D) -> (B, ~L/2, D)
        return self.pool(F.elu(self.norm(self.conv(x.transpose(1, 2))))).transpose(1, 2)


class Model(nn.Module):
    """Informer: an encoder-decoder Transformer with ProbSparse self-attention, self-attention distilling and a
    generative decoder that forecasts the whole horizon in one pass.

    Zhou, Zhang, Peng, Zhang, Li, Xiong, Zhang. "Informer: Beyond Efficient Transformer for Long Sequence
    Time-Series Forecasting." AAAI 2021. https://arxiv.org/abs/2012.07436 (official code:
    github.com/zhouhaoyi/Informer2020; the port in github.com/thuml/Autoformer and thuml/Time-Series-Library)

    Window and decoder input (the last label_len points of the window, then zeros for the horizon) are embedded
    (value convolution + sinusoidal position + calendar features of their time steps: x_mark covers window and
    horizon). The encoder's layers (ProbSparse self-attention, feed-forward) are separated by distilling layers
    (convolution, BatchNorm, ELU, max-pool) that halve the sequence; the decoder's layers add masked ProbSparse
    self-attention and full cross-attention to the encoder output; a linear projection of the decoder's last
    output_token_len steps is the forecast of every channel (k values a point with n_outputs k). With attn
    "full" the self-attentions are full.
    ProbSparse attention draws its sampled keys with torch.randint from torch's global CPU generator (as the
    official code): in training from its running state (so torch.manual_seed governs them, and each DDP rank
    draws its own); in eval mode from that generator seeded with EVAL_SEED afresh for every forward, its state
    restored afterwards. Defaults are the official main_informer.py's (its ETTh1 scripts: factor 3 at horizon 24
    only, label_len = seq_len from horizon 168 up).

    variant "tslib" computes as the port that produced the benchmark numbers at lookback 96 (Autoformer's paper
    and TSLib): every ProbSparse layer merges heads in (head, time) order (see Attention: mix), the cross-attention
    uses `attn` too, and the distilling convolution pads 2 (the sequence grows by 2 before pooling: 96 -> 49,
    not 48). The official code merges heads so only in the decoder self-attention and pads 1.

    Deviations from the official code (and the port):
    - Embeddings: TSLib's (models.layers.embed), whose value convolution and calendar linear map have no bias;
      the official ones have biases (the port's have none). Calendar features are the framework's (timeF, the
      official default), not the official fixed/learned embeddings of calendar fields.
    - ProbSparse scores come from one dense Q K^T product (same values, see probsparse_attention), so compute and
      memory grow as L_Q x L_K rather than the paper's L log L; the TSLib port's squeeze() (wrong shapes with one
      head or one sampled key) is not reproduced.
    - Eval mode: the official code draws the sampled keys from the running global generator, so its evaluation
      differs from call to call (and advances the training random stream); here evaluation is deterministic
      (the same sample for every batch of a shape, the official draws after torch.manual_seed(EVAL_SEED)) and
      leaves the generator as it found it.
    - Not carried over: output_attention, InformerStack, the official --padding 1 (ones in the decoder input),
      --mix off. The dropout the official ProbAttention defines but never applies is left out.
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=True, time_marks=True,
                                future_marks=True, multi_output=True)

    @dataclass
    class Config:
        d_model: int = d_model(512)
        n_heads: int = n_heads(8)
        # tiny 2 (not the shared factory's 1): the contract test then covers a distilling layer and its BatchNorm
        e_layers: int = hparam(2, "number of encoder layers", tiny=2, low=1)
        d_layers: int = hparam(1, "number of decoder layers", tiny=1, low=1)
        d_ff: int = d_ff(2048)
        dropout: float = dropout(0.05)
        activation: str = activation("gelu")
        factor: int = hparam(5, "attention sampling factor (ProbSparse / Auto-Correlation top-k: factor x log L)",
                             tiny=1, low=1)
        attn: str = hparam("prob", "Informer's self-attention: prob (ProbSparse) or full", choices=("prob", "full"))
        distil: bool = hparam(True, "self-attention distilling between encoder layers (conv + max-pool halving the "
                                    "sequence; TSLib's --distil switch turns it off)")
        label_len: int = label_len(48)
        variant: str = hparam("official", "Informer's computation: official (zhouhaoyi/Informer2020) or tslib (the "
                                          "Autoformer/TSLib port behind the lookback-96 benchmark numbers)",
                              choices=("official", "tslib"))

    def __init__(self, configs):
        super().__init__()
        self.seq_len, self.label_len, self.horizon = configs.seq_len, configs.label_len, configs.output_token_len
        self.n_outputs = configs.n_outputs
        if self.label_len > self.seq_len:
            raise ValueError(f"label_len {self.label_len} exceeds seq_len {self.seq_len}")
        C, D, tslib, kind = configs.enc_in, configs.d_model, configs.variant == "tslib", configs.attn
        cross_kind = kind if tslib else "full"

        def attention(kind, causal=False, mix=False):
            return Attention(kind, configs.factor, configs.dropout, causal, mix or (tslib and kind == "prob"))

        self.encoder_embedding = DataEmbedding(C, D, configs.n_marks, configs.dropout)
        self.decoder_embedding = DataEmbedding(C, D, configs.n_marks, configs.dropout)
        self.encoder = nn.ModuleList(Layer(configs, attention(kind)) for _ in range(configs.e_layers))
        self.distilling = nn.ModuleList(() if not configs.distil else (
            Distilling(D, 2 if tslib else 1) for _ in range(configs.e_layers - 1)))
        self.encoder_norm = nn.LayerNorm(D)
        self.decoder = nn.ModuleList(Layer(configs, attention(kind, causal=True, mix=not tslib),
                                           attention(cross_kind)) for _ in range(configs.d_layers))
        self.decoder_norm = nn.LayerNorm(D)
        self.projection = nn.Linear(D, C * self.n_outputs)
        self.samples = kind == "prob" or cross_kind == "prob"

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.training or not self.samples:
            return self._forward(x, x_mark)
        # evaluation draws from the CPU generator seeded afresh; the caller's generator state is restored after
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(EVAL_SEED)
            return self._forward(x, x_mark)

    def _forward(self, x: torch.Tensor, x_mark: torch.Tensor | None) -> torch.Tensor:
        L, S, P = self.seq_len, self.label_len, self.horizon
        encoder_marks = decoder_marks = None
        if x_mark is not None:
            encoder_marks, decoder_marks = x_mark[:, :L], x_mark[:, L - S:L + P]
        h = self.encoder_embedding(x, encoder_marks)
        for i, layer in enumerate(self.encoder):
            h = layer(h)
            if i < len(self.distilling):
                h = self.distilling[i](h)
        h = self.encoder_norm(h)
        out = self.decoder_embedding(F.pad(x[:, L - S:], (0, 0, 0, P)), decoder_marks)
        for layer in self.decoder:
            out = layer(out, h)
        return split_points(self.projection(self.decoder_norm(out[:, -P:])), self.n_outputs)
