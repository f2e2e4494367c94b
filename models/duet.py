import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, activation, d_ff, d_model, dropout, e_layers, hparam, n_heads
from models.layers.batch_stats import BatchMean
from models.layers.decomposition import SeriesDecomposition
from models.layers.dropout import Dropout
from models.layers.normalization import RevIN
from models.layers.outputs import channels_last, split_points
from models.layers.transformer import activation as make_activation

NOISE_FLOOR = 1e-2  # the least standard deviation of the gating noise (the official noise_epsilon)
UNRELATED = -math.log(1e10)  # the attention score a masked pair gets in place of its own (official: not -inf)


def squared_variation(x: torch.Tensor) -> torch.Tensor:
    """The squared coefficient of variation of x's entries, 0 for a single one: small when they are equal."""
    if x.numel() == 1:
        return x.new_zeros(())
    return x.var() / (x.mean() ** 2 + 1e-10)


def normal_cdf(z: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(z / math.sqrt(2)))


class Router(nn.Module):
    """Maps each series' raw window (rows, L) to a score per expert: Linear, ReLU, Linear, without biases (the
    official distributional router encoder)."""

    def __init__(self, seq_len: int, hidden: int, n_experts: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(seq_len, hidden, bias=False), nn.ReLU(),
                                 nn.Linear(hidden, n_experts, bias=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class LinearExpert(nn.Module):
    """DLinear's map of a decomposed window to d_model features: one linear layer over the seasonal part, one over
    the trend, summed; both weights start at 1 / L (the window's mean), as the official extractor's."""

    def __init__(self, seq_len: int, width: int):
        super().__init__()
        self.seasonal, self.trend = nn.Linear(seq_len, width), nn.Linear(seq_len, width)
        for layer in (self.seasonal, self.trend):
            nn.init.constant_(layer.weight, 1 / seq_len)

    def forward(self, seasonal: torch.Tensor, trend: torch.Tensor) -> torch.Tensor:
        return self.seasonal(seasonal) + self.trend(trend)


class ChannelMask(nn.Module):
    """The Channel Clustering Module: which channels each channel attends to, (B, 1, C, C) of 0 and 1.

    The amplitude spectra of the channels' raw windows are compared through a learnt Mahalanobis metric:
    d_ij = |A s_i - A s_j|^2 with A of (L // 2 + 1)^2 entries. Closeness 1 / d_ij, divided by each row's largest
    (no gradient through that maximum), times 0.99 is the probability that two channels are related; a channel is
    always related to itself (0.99). Training draws the mask from these Bernoulli probabilities by the hard
    Gumbel-softmax (torch's generator; the gradient passes straight through to A); eval takes each pair's more
    likely outcome (probability >= 0.5), so it draws nothing."""

    def __init__(self, seq_len: int):
        super().__init__()
        n_freq = seq_len // 2 + 1
        self.metric = nn.Parameter(torch.randn(n_freq, n_freq))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, L, C), the raw window
        C = x.shape[-1]
        spectra = torch.fft.rfft(x.transpose(1, 2), dim=-1).abs() @ self.metric.T  # (B, C, F), A s_i
        # pairwise distances without the (B, C, C, F) differences or a Gram matrix's cancellation
        distance = torch.cdist(spectra, spectra, compute_mode="donot_use_mm_for_euclid_dist").square()
        eye = torch.eye(C, device=x.device, dtype=x.dtype)
        closeness = (1 - eye) / (distance + 1e-10)
        p = closeness / closeness.max(-1, keepdim=True).values.detach()
        p = (p * (1 - eye) + eye) * 0.99
        if not self.training:
            return (p >= 0.5).to(x.dtype).unsqueeze(1)
        logits = torch.stack([torch.log(p / (1 - p)), torch.log((1 - p) / p)], dim=-1)
        drawn = F.gumbel_softmax(logits.reshape(-1, 2), hard=True)[:, 0]
        return drawn.view_as(p).unsqueeze(1)


class MaskedChannelAttention(nn.Module):
    """Multi-head attention across channels where a masked pair's score is replaced by log(1e-10) before the
    scaling and softmax (the official masked attention): mask (B, 1, C, C) multiplies the scores, so that its
    straight-through gradient reaches the Channel Clustering Module."""

    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} must be divisible by n_heads {n_heads}")
        self.n_heads, self.scale = n_heads, (d_model // n_heads) ** -0.5
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
        B, C, D = x.shape
        q, k, v = self.qkv(x).view(B, C, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) * mask + penalty
        weights = self.dropout(torch.softmax(scores * self.scale, dim=-1))
        return self.out((weights @ v).transpose(1, 2).reshape(B, C, D))


class FusionLayer(nn.Module):
    """Post-norm Transformer layer over the channels' tokens with the masked attention: x = norm(x + attn),
    norm(x + ffn), dropout on both branches and inside the feed-forward block."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, act: str):
        super().__init__()
        self.attention = MaskedChannelAttention(d_model, n_heads, dropout)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), make_activation(act), Dropout(dropout),
                                 nn.Linear(d_ff, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, mask, penalty)))
        return self.norm2(x + self.dropout(self.ffn(x)))


class Model(nn.Module):
    """DUET: dual clustering, of the windows' temporal patterns and of the channels, for multivariate forecasting.

    Qiu, Wu, Lin, Guo, Hu, Yang. "DUET: Dual Clustering Enhanced Multivariate Time Series Forecasting." KDD 2025.
    https://arxiv.org/abs/2412.10859 (official code: github.com/decisionintelligence/DUET,
    ts_benchmark/baselines/duet; the same in github.com/decisionintelligence/TFB)

    Temporal Clustering Module: every channel's window is a series of its own. A router (an MLP of the raw window)
    scores num_experts linear pattern extractors with noisy top-k gating (Shazeer et al., 2017): in training,
    Gaussian noise of a learnt scale (softplus of a second router, at least 0.01) is added to the scores, which are
    then mixed by a learnt matrix (identity at first, used in training only) and softmax-normalised; the
    active_experts best keep their renormalised weights. Each extractor maps the RevIN-normalised (learnable
    affine), moving-average-decomposed window to d_model features, and the gates weight their sum. Channel
    Clustering Module (ChannelMask): a mask of related channels from the amplitude spectra of the raw windows.
    Fusion Module: e_layers Transformer layers over the channels' tokens whose attention the mask restricts, and a
    final LayerNorm (skipped, with the mask, for one channel). A linear head maps each token to the horizon, and
    RevIN is undone.

    Training loss: forward returns the term {"load_balance": cv^2(importance) + cv^2(load)} (the official weight 1),
    where importance is each expert's mean gate over the batch's series and load each expert's mean chance of being
    among the top k under the noise (with every expert active: its share of the series, without gradient). Both are
    batch statistics taken as a BatchMean, so under DDP the term is that of the global batch; the gradient passes
    through this rank's own series (exact under DDP's gradient average).

    Deviations from the official code: every channel is routed on its own (the official CI=1 of every script; CI=0
    is not offered); the load-balancing statistics are means over the series where the official code sums them
    (the squared coefficient of variation is the same, up to its 1e-10); the experts run densely, each weighted by
    its gate (0 where it is not chosen), in place of dispatching each expert its series; the distance A s_i - A s_j
    where the official code takes A (s_i - s_j) (equal up to rounding, without a (B, C, C, F) tensor); the eval
    mask is each pair's more likely outcome where the official code draws it in eval too; the feed-forward blocks
    are nn.Linear for Conv1d of kernel 1 (the same map and initialisation); query, key and value are one nn.Linear
    (the three official ones stacked); RevIN's window statistics are not detached (the input carries no gradient).
    """
    capabilities = Capabilities(direct=True, covariate=True, aux_loss=True, multi_output=True)

    @dataclass
    class Config:  # defaults: the official MODEL_HYPER_PARAMS (duet.py)
        d_model: int = d_model(512)
        n_heads: int = n_heads(8)
        e_layers: int = e_layers(2)
        d_ff: int = d_ff(2048)
        dropout: float = dropout(0.2)
        fc_dropout: float = hparam(0.2, "dropout after the linear forecast head (the official fc_dropout)", tiny=0.0,
                                   low=0.0, high=1.0)
        activation: str = activation("gelu")
        num_experts: int = hparam(4, "experts in each mixture-of-experts layer", tiny=3, low=1)
        active_experts: int = hparam(1, "experts each series is routed to, top-k (the official k)", tiny=2, low=1)
        router_hidden: int = hparam(256, "hidden width of the routers that score the experts (the official "
                                         "hidden_size)", tiny=8, low=1)
        moving_avg: int = hparam(25, "moving-average window of the experts' seasonal-trend decomposition", tiny=5,
                                 low=1)

    def __init__(self, configs):
        super().__init__()
        if not 1 <= configs.active_experts <= configs.num_experts:
            raise ValueError(f"active_experts must be between 1 and num_experts {configs.num_experts}, got "
                             f"{configs.active_experts}")
        L, self.n_outputs = configs.seq_len, configs.n_outputs
        self.n_experts, self.k = configs.num_experts, configs.active_experts
        self.gate = Router(L, configs.router_hidden, self.n_experts)
        self.noise = Router(L, configs.router_hidden, self.n_experts)
        self.mix = nn.Parameter(torch.eye(self.n_experts))  # the official W_h, applied to the noisy scores only
        self.experts = nn.ModuleList(LinearExpert(L, configs.d_model) for _ in range(self.n_experts))
        self.decomposition = SeriesDecomposition(configs.moving_avg)
        self.revin = RevIN(configs.enc_in, inverse_eps=1e-10)  # the official eps^2
        self.balance_stats = BatchMean()
        self.mask = ChannelMask(L)
        self.layers = nn.ModuleList(FusionLayer(configs.d_model, configs.n_heads, configs.d_ff, configs.dropout,
                                                configs.activation) for _ in range(configs.e_layers))
        self.norm = nn.LayerNorm(configs.d_model)
        self.head = nn.Sequential(nn.Linear(configs.d_model, configs.output_token_len * self.n_outputs),
                                  Dropout(configs.fc_dropout))

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None):
        B, L, C = x.shape
        gates, load = self._route(x.transpose(1, 2).reshape(B * C, L))
        normed, stats = self.revin.normalize(x)
        seasonal, trend = self.decomposition(normed.transpose(1, 2).reshape(B * C, L))
        mixed = sum(gates[:, i, None] * expert(seasonal, trend) for i, expert in enumerate(self.experts))
        h = mixed.view(B, C, -1)
        if C > 1:
            mask = self.mask(x)
            penalty = torch.where(mask == 0, UNRELATED, 0.0)
            for layer in self.layers:
                h = layer(h, mask, penalty)
            h = self.norm(h)
        out = self.revin.denormalize(channels_last(split_points(self.head(h), self.n_outputs)), stats)
        if not self.training:
            return out
        return out, {"load_balance": self._balance(gates, load)}

    def _route(self, series: torch.Tensor):
        """Noisy top-k gating of each series (rows, L): its gates (rows, E), zero but for its k experts, and each
        expert's load per series (rows, E): the chance of being among the top k under the noise where that is
        differentiable (training with k < E), else whether it is chosen."""
        clean = self.gate(series)
        if self.training:
            spread = F.softplus(self.noise(series)) + NOISE_FLOOR
            noisy = clean + torch.randn_like(clean) * spread
            probs = torch.softmax(noisy @ self.mix, dim=-1)
        else:
            probs = torch.softmax(clean, dim=-1)
        top, chosen = probs.topk(min(self.k + 1, self.n_experts), dim=-1)
        weights = top[:, :self.k] / (top[:, :self.k].sum(-1, keepdim=True) + 1e-6)
        gates = torch.zeros_like(probs).scatter(-1, chosen[:, :self.k], weights)
        if self.training and self.k < self.n_experts:
            # as the official code: the thresholds are the softmax probabilities of the mixed noisy scores, compared
            # with the unmixed scores
            threshold_in, threshold_out = top[:, self.k:self.k + 1], top[:, self.k - 1:self.k]
            load = torch.where(noisy > threshold_in, normal_cdf((clean - threshold_in) / spread),
                               normal_cdf((clean - threshold_out) / spread))
        else:
            load = (gates > 0).to(gates.dtype)
        return gates, load

    def _balance(self, gates: torch.Tensor, load: torch.Tensor) -> torch.Tensor:
        """cv^2 of the experts' mean gate plus cv^2 of their mean load: the means of the global batch (BatchMean),
        with the gradient of this rank's series."""
        per_series = torch.cat([gates, load], dim=-1)
        local = per_series.mean(0)
        means = self.balance_stats(per_series.detach()) + local - local.detach()
        return squared_variation(means[:self.n_experts]) + squared_variation(means[self.n_experts:])
