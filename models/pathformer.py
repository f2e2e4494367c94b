import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, d_ff, dropout, hparam, use_norm
from models.layers.batch_stats import BatchMean
from models.layers.decomposition import SeriesDecomposition
from models.layers.dropout import Dropout
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points

NOISE_FLOOR = 1e-2  # the least standard deviation of the gating noise (the official noise_epsilon)
TREND_KERNELS = (4, 8, 12)  # the router's moving averages, mixed per point
SEASONAL_FREQUENCIES = 3  # the router's strongest frequencies kept as its seasonal part
INTRA_HEADS = 2
SEED_WIDTH = 16  # width of the learnt vectors the intra-patch queries and the per-channel weights are made from
FACTORS = 10  # the per-channel weights are P M_c Q with M_c a FACTORS x FACTORS matrix of each channel


def patch_sizes(text: str) -> list:
    try:
        sizes = [int(size) for size in text.split(",")]
    except ValueError:
        raise ValueError(f"patch_sizes must be comma-separated integers, got {text!r}") from None
    if min(sizes) < 1:
        raise ValueError(f"patch_sizes must be positive, got {text!r}")
    return sizes


def squared_variation(x: torch.Tensor) -> torch.Tensor:
    """The squared coefficient of variation of x's entries, 0 for a single one: small when they are equal."""
    if x.numel() == 1:
        return x.new_zeros(())
    return x.var() / (x.mean() ** 2 + 1e-10)


def normal_cdf(z: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1 + torch.erf(z / math.sqrt(2)))


class ChannelWeights(nn.Module):
    """Two (D, D) weights and (D,) biases per channel, generated from a learnt vector per channel: an MLP maps it to
    a FACTORS x FACTORS matrix M_c (and its FACTORS^2 entries to the biases through B_i); weight i is P_i M_c Q_i.
    Initialised as the official WeightGenerator (factorized)."""

    def __init__(self, channels: int, width: int):
        super().__init__()
        self.memory = nn.Parameter(torch.randn(channels, SEED_WIDTH))
        self.generator = nn.Sequential(nn.Linear(SEED_WIDTH, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                                       nn.Linear(64, FACTORS ** 2))
        self.P = nn.ParameterList(nn.Parameter(torch.empty(width, FACTORS)) for _ in range(2))
        self.Q = nn.ParameterList(nn.Parameter(torch.empty(FACTORS, width)) for _ in range(2))
        self.B = nn.ParameterList(nn.Parameter(torch.empty(FACTORS ** 2, width)) for _ in range(2))
        for weight in (*self.P, *self.Q, *self.B):
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))

    def forward(self):
        """[(weight (C, D, D), bias (C, D))] for the keys and the values."""
        codes = self.generator(self.memory)
        factors = codes.view(-1, FACTORS, FACTORS)
        return [(self.P[i] @ factors @ self.Q[i], codes @ self.B[i]) for i in range(2)]


class IntraPatchAttention(nn.Module):
    """Within each patch of p points: a learnt query per patch and channel attends (2 heads) to itself and the
    patch's points, keys and values projected by weights of each channel's own (ChannelWeights); a shared MLP
    (Linear, ReLU, Linear) maps the result, one token per patch, and a linear map over the patches widens the n
    tokens to the window's n p points."""

    def __init__(self, seq_len: int, patch: int, channels: int, width: int):
        super().__init__()
        self.patch, n = patch, seq_len // patch
        self.seeds = nn.Parameter(torch.rand(n, channels, SEED_WIDTH))
        # a linear map of each patch's own from its seeds to its queries (the official one nn.Linear per patch)
        bound = SEED_WIDTH ** -0.5
        self.query_weight = nn.Parameter(torch.empty(n, width, SEED_WIDTH).uniform_(-bound, bound))
        self.query_bias = nn.Parameter(torch.empty(n, width).uniform_(-bound, bound))
        self.key_value = ChannelWeights(channels, width)
        self.shared = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
        self.widen = nn.Linear(n, seq_len)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, L, C, D)
        B, L, C, D = x.shape
        n, hs = L // self.patch, D // INTRA_HEADS
        query = torch.einsum("ncs,nds->ncd", self.seeds, self.query_weight) + self.query_bias[:, None]  # (n, C, D)
        points = torch.cat([query[:, None].expand(B, n, 1, C, D), x.view(B, n, self.patch, C, D)], dim=2)
        (w_key, b_key), (w_value, b_value) = self.key_value()
        key = torch.einsum("bntcd,cde->bntce", points, w_key) + b_key
        value = torch.einsum("bntcd,cde->bntce", points, w_value) + b_value
        scores = torch.einsum("nchs,bntchs->bncht", query.view(n, C, INTRA_HEADS, hs),
                              key.view(B, n, -1, C, INTRA_HEADS, hs)) / math.sqrt(hs)
        out = torch.einsum("bncht,bntchs->bnchs", scores.softmax(-1), value.view(B, n, -1, C, INTRA_HEADS, hs))
        out = self.shared(out.reshape(B, n, C, D))
        return self.widen(out.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class InterPatchAttention(nn.Module):
    """Across the patches of each channel: a patch's p points of D features are one token of D p (feature-major),
    embedded linearly with a learnt position, and attended to with D heads of p dimensions each."""

    def __init__(self, seq_len: int, patch: int, width: int, dropout: float):
        super().__init__()
        self.patch, self.heads, n, token = patch, width, seq_len // patch, width * patch
        self.embed = nn.Linear(token, token)
        self.position = nn.Parameter(torch.empty(n, token).uniform_(-0.02, 0.02))
        self.query, self.key, self.value = (nn.Linear(token, token) for _ in range(3))
        self.out = nn.Linear(token, token)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, L, C, D)
        B, L, C, D = x.shape
        n = L // self.patch
        tokens = x.view(B, n, self.patch, C, D).permute(0, 3, 1, 4, 2).reshape(B * C, n, D * self.patch)
        tokens = self.dropout(self.embed(tokens) + self.position)
        q, k, v = (project(tokens).view(B * C, n, self.heads, self.patch).transpose(1, 2)
                   for project in (self.query, self.key, self.value))
        out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B * C, n, D * self.patch)
        # read back channel by channel as (time, channel): the official reshape, which interleaves the channels'
        # positions where there are several (kept so that trained official weights mean the same here)
        return self.dropout(self.out(out)).reshape(B, L, C, D)


class Expert(nn.Module):
    """One patch size's dual-attention Transformer layer: x + intra-patch + inter-patch attention, dropout, then a
    residual feed-forward block (Linear, GELU, dropout, Linear)."""

    def __init__(self, seq_len: int, patch: int, channels: int, width: int, hidden: int, dropout: float,
                 ffn_dropout: float):
        super().__init__()
        self.intra = IntraPatchAttention(seq_len, patch, channels, width)
        self.inter = InterPatchAttention(seq_len, patch, width, dropout)
        self.dropout = Dropout(dropout)
        self.ffn = nn.Sequential(nn.Linear(width, hidden), nn.GELU(), Dropout(ffn_dropout), nn.Linear(hidden, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.dropout(x + self.intra(x) + self.inter(x))
        return self.ffn(out) + out


class MultiScaleLayer(nn.Module):
    """Adaptive multi-scale block: a router picks the k patch sizes (experts) for each window; their outputs are
    mixed as log(sum_i g_i exp(y_i)) (the official dispatcher combines in log space); optional residual.

    Router: from the first feature of every point and channel, z (B, L, C), it takes z + seasonal + trend, where the
    seasonal part is the sum of the 3 strongest frequencies of z (neither the mean nor the Nyquist frequency) and the
    trend a per-point softmax mix of moving averages of 4, 8 and 12 points; a linear map over the channels, then over
    time, scores the experts. Noisy top-k gating (Shazeer et al., 2017): in training, Gaussian noise of a learnt
    scale (softplus of a second linear map, at least 0.01) is added to the scores; the k best are softmax-normalised.
    """

    def __init__(self, seq_len: int, channels: int, patches: list, k: int, width: int, hidden: int, dropout: float,
                 ffn_dropout: float, residual: bool):
        super().__init__()
        self.k, self.n_experts, self.residual = k, len(patches), residual
        self.trends = nn.ModuleList(SeriesDecomposition(kernel) for kernel in TREND_KERNELS)
        self.trend_mix = nn.Linear(1, len(TREND_KERNELS))
        self.channels = nn.Linear(channels, 1)
        self.gate, self.noise = nn.Linear(seq_len, self.n_experts), nn.Linear(seq_len, self.n_experts)
        self.experts = nn.ModuleList(Expert(seq_len, patch, channels, width, hidden, dropout, ffn_dropout)
                                     for patch in patches)
        self.balance_stats = BatchMean()

    def forward(self, x: torch.Tensor):  # x: (B, L, C, D) -> (B, L, C, D), the balance loss (None in eval)
        log_gates, gates, load = self._route(self._router_input(x[..., 0]))
        outputs = torch.stack([expert(x) for expert in self.experts], dim=-1)  # (B, L, C, D, E)
        # every expert runs on every window (the unchosen at weight 0) so that each gets a gradient, under DDP too
        out = torch.logsumexp(outputs + log_gates[:, None, None, None], dim=-1)
        return (out + x if self.residual else out), (self._balance(gates, load) if self.training else None)

    def _router_input(self, z: torch.Tensor) -> torch.Tensor:  # z: (B, L, C)
        # in float32 under --use_amp: no FFT takes bfloat16, and cuFFT's float16 only powers of two
        z, L = z.float(), z.shape[1]
        spectrum = torch.fft.rfft(z, dim=1)
        band = spectrum[:, 1:(L + 1) // 2]  # without the mean and, for an even L, the Nyquist frequency
        strongest = band.abs().topk(SEASONAL_FREQUENCIES, dim=1).indices + 1
        keep = torch.zeros_like(z[:, :spectrum.shape[1]]).scatter(1, strongest, 1.0)
        seasonal = torch.fft.irfft(spectrum * keep, n=L, dim=1)
        series = z.transpose(1, 2)
        trends = torch.stack([decompose(series)[1] for decompose in self.trends], dim=-1).transpose(1, 2)
        trend = (trends * self.trend_mix(z.unsqueeze(-1)).softmax(-1)).sum(-1)
        return z + seasonal + trend

    def _route(self, series: torch.Tensor):
        """Per window: the experts' log gates (B, E) (-inf for the unchosen), gates (B, E) and load (B, E): the
        chance of being among the top k under the noise where that is differentiable (training with k < E), else
        whether it is chosen."""
        summary = self.channels(series).squeeze(-1)
        clean = self.gate(summary)
        logits = clean
        if self.training:
            spread = F.softplus(self.noise(summary)) + NOISE_FLOOR
            logits = clean + torch.randn_like(clean) * spread
        top, chosen = logits.topk(min(self.k + 1, self.n_experts), dim=-1)
        weights = top[:, :self.k].log_softmax(-1)
        log_gates = torch.full_like(logits, -math.inf).scatter(-1, chosen[:, :self.k], weights)
        gates = torch.zeros_like(logits).scatter(-1, chosen[:, :self.k], weights.exp())
        if self.training and self.k < self.n_experts:
            threshold_in, threshold_out = top[:, self.k:self.k + 1], top[:, self.k - 1:self.k]
            load = torch.where(logits > threshold_in, normal_cdf((clean - threshold_in) / spread),
                               normal_cdf((clean - threshold_out) / spread))
        else:
            load = (gates > 0).to(gates.dtype)
        return log_gates, gates, load

    def _balance(self, gates: torch.Tensor, load: torch.Tensor) -> torch.Tensor:
        """cv^2 of the experts' mean gate plus cv^2 of their mean load: the means of the global batch (BatchMean),
        with the gradient of this rank's windows."""
        per_window = torch.cat([gates, load], dim=-1)
        local = per_window.mean(0)
        means = self.balance_stats(per_window.detach()) + local - local.detach()
        return squared_variation(means[:self.n_experts]) + squared_variation(means[self.n_experts:])


class Model(nn.Module):
    """Pathformer: multi-scale Transformers with adaptive pathways.

    Chen, Zhang, Wang, Zhou, Yang, Wen, Qiu, Guo, Chen, Yang. "Pathformer: Multi-scale Transformers with Adaptive
    Pathways for Time Series Forecasting." ICLR 2024. https://arxiv.org/abs/2402.05956 (official code:
    github.com/decisionintelligence/pathformer, models/PathFormer.py, layers/AMS.py, layers/Layer.py)

    Each point of each (instance-normalised) channel is embedded linearly to d_model features; e_layers adaptive
    multi-scale layers (MultiScaleLayer) follow, each with num_experts experts, one per patch size (patch_sizes:
    the first layer's num_experts sizes, then the next layer's...), of which a router picks active_experts per
    window; each expert is a dual-attention layer (intra-patch attention to the points of a patch, inter-patch
    attention across the patches). A linear head maps each channel's seq_len x d_model features to the horizon.

    Training loss: forward returns {"balance": balance_weight x the sum over the layers of cv^2(importance) +
    cv^2(load)} (the official loss_coef 0.01, which the official loss adds as it is), importance being each expert's
    mean gate over the batch's windows and load each expert's mean chance of being among the top k under the noise
    (with every expert active: its share of the windows, without gradient). Both are batch statistics taken as a
    BatchMean, so under DDP the term is that of the global batch; the gradient passes through this rank's windows.

    Deviations from the official code: every expert runs on every window, the unchosen weighted by exp(-inf) = 0,
    where the official code dispatches each expert its windows (the same forecast; dropout draws differ); the mixture
    log(sum_i g_i exp(y_i)) is a log-sum-exp where the official code exponentiates in float32 (inf beyond
    exp(88), and an all-zero sum clamped to log(2.2e-16)); the load-balancing statistics are means over the windows
    where the official code sums them (the same cv^2 up to its 1e-10); its --batch_norm option (0 in every official
    script) is not offered; modules the official code builds and never calls (each layer's end_MLP, the unused
    BatchNorms) do not exist here; the shared intra-patch MLP is nn.Linear (the official x P + B with P transposed;
    the same initialisation); the router's seasonal part is an inverse FFT of the kept frequencies (the official sum
    of their cosines, equal up to rounding); the official dropout rates (0.1, 0.2 inside the feed-forward block) are
    the flags dropout and ffn_dropout; the official --drop is never read, so it has no counterpart.
    """
    capabilities = Capabilities(direct=True, covariate=True, aux_loss=True, multi_output=True)

    @dataclass
    class Config:  # defaults: the official run.py's
        d_model: int = hparam(16, "features per point and channel (even: 2 intra-patch heads; the inter-patch "
                                  "attention has d_model heads)", tiny=4, low=2)
        d_ff: int = d_ff(64)
        e_layers: int = hparam(3, "adaptive multi-scale layers (the official layer_nums)", tiny=1, low=1)
        num_experts: int = hparam(4, "experts, one per patch size, in each layer (the official num_experts_list)",
                                  tiny=2, low=1)
        active_experts: int = hparam(2, "patch sizes each window is routed to in each layer, top-k (the official k)",
                                     tiny=1, low=1)
        patch_sizes: str = hparam("16,12,8,32,12,8,6,4,8,6,4,2", "comma-separated patch sizes, num_experts per "
                                  "layer, layer after layer, each dividing seq_len (the official patch_size_list)",
                                  tiny="8,4")
        residual_connection: bool = hparam(False, "add each layer's input to its output", tiny=True)
        dropout: float = dropout(0.1)
        ffn_dropout: float = hparam(0.2, "dropout inside the experts' feed-forward blocks", tiny=0.0, low=0.0,
                                    high=1.0)
        balance_weight: float = hparam(0.01, "weight of the routers' load-balancing loss (the official loss_coef)",
                                       low=0.0)
        use_norm: bool = use_norm(True)

    def __init__(self, configs):
        super().__init__()
        L, C, E = configs.seq_len, configs.enc_in, configs.num_experts
        sizes = patch_sizes(configs.patch_sizes)
        if len(sizes) != configs.e_layers * E:
            raise ValueError(f"patch_sizes must have e_layers x num_experts = {configs.e_layers * E} entries, got "
                             f"{len(sizes)}")
        if any(L % size for size in sizes):
            raise ValueError(f"every patch size must divide seq_len {L}, got {configs.patch_sizes}")
        if configs.d_model % INTRA_HEADS:
            raise ValueError(f"d_model must be even (the intra-patch attention's 2 heads), got {configs.d_model}")
        if not 1 <= configs.active_experts <= E:
            raise ValueError(f"active_experts must be between 1 and num_experts {E}, got {configs.active_experts}")
        if (L - 1) // 2 < SEASONAL_FREQUENCIES:
            raise ValueError(f"seq_len must be at least 8 (the router keeps {SEASONAL_FREQUENCIES} frequencies), "
                             f"got {L}")
        self.use_norm, self.n_outputs, self.balance_weight = configs.use_norm, configs.n_outputs, configs.balance_weight
        self.embed = nn.Linear(1, configs.d_model)
        self.layers = nn.ModuleList(
            MultiScaleLayer(L, C, sizes[i * E:(i + 1) * E], configs.active_experts, configs.d_model, configs.d_ff,
                            configs.dropout, configs.ffn_dropout, configs.residual_connection)
            for i in range(configs.e_layers))
        self.head = nn.Linear(L * configs.d_model, configs.output_token_len * self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None):
        B, L, C = x.shape
        if self.use_norm:
            x, stats = normalize(x)
        h, losses = self.embed(x.unsqueeze(-1)), []
        for layer in self.layers:
            h, loss = layer(h)
            losses.append(loss)
        out = channels_last(split_points(self.head(h.transpose(1, 2).reshape(B, C, -1)), self.n_outputs))
        if self.use_norm:
            out = denormalize(out, stats)
        if not self.training:
            return out
        return out, {"balance": self.balance_weight * sum(losses)}
