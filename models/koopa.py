import math
from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, dropout, hparam
from models.layers.dropout import Dropout
from models.layers.normalization import denormalize, normalize

ALPHA = 0.2  # the official --alpha: the share of a window's rfft frequencies that are time-invariant


def dominant_frequencies(batches, alpha: float = ALPHA) -> list[int]:
    """The official mask_spectrum of training windows given in batches (each (n, seq_len, channels)): the
    int(alpha x (seq_len // 2 + 1)) rfft frequencies of the largest amplitude averaged over windows and channels,
    largest first."""
    total = None
    for x in batches:
        amplitude = torch.fft.rfft(x.double(), dim=1).abs().sum(dim=(0, 2))
        total = amplitude if total is None else total + amplitude
    return total.topk(int(total.shape[0] * alpha)).indices.tolist()


def mlp(f_in: int, f_out: int, hidden: int, layers: int, act: nn.Module, p: float) -> nn.Sequential:
    """`layers` linear layers f_in -> hidden -> ... -> hidden -> f_out, activation and dropout after all but the
    last (the official MLP)."""
    widths = [f_in] + [hidden] * (layers - 1)
    blocks = [m for a, b in zip(widths, widths[1:]) for m in (nn.Linear(a, b), act, Dropout(p))]
    return nn.Sequential(*blocks, nn.Linear(hidden, f_out))


def one_step_operator(z: torch.Tensor) -> torch.Tensor:
    """DMD: the (B, D, D) operator K of least squares z[t] K = z[t + 1] over the window's snapshots z (B, S, D)
    (the minimum-norm one when the snapshots are fewer than D), NaN replaced as the official code does. LAPACK's
    gels (QR / LQ, full rank assumed) on every device: torch's only driver on CUDA, where the official results were
    computed; its CPU default, gelsy, varies with memory alignment under MKL, so that one window's forecast would
    not repeat exactly."""
    K = torch.linalg.lstsq(z[:, :-1], z[:, 1:], driver="gels").solution
    return nan_to_identity(K)


def nan_to_identity(K: torch.Tensor) -> torch.Tensor:
    """K (B, D, D), or the identity for every window where any entry of the batch's K is NaN."""
    return torch.where(K.isnan().any(), torch.eye(K.shape[-1], dtype=K.dtype, device=K.device), K)


class Model(nn.Module):
    """Koopa: stacked blocks that split the series with a Fourier filter into a time-invariant part, advanced by a
    learned Koopman operator, and a time-variant part, advanced by an operator fitted to each window (DMD).

    Liu, Li, Wang, Long. "Koopa: Learning Non-stationary Time Series Dynamics with Koopman Predictors." NeurIPS
    2023. https://arxiv.org/abs/2305.18803 (official code: github.com/thuml/Koopa; the TSLib port:
    github.com/thuml/Time-Series-Library, models/Koopa.py)

    The window is standardised per channel (Series Stationarization), the forecast gets its mean and std back.
    Each of num_blocks blocks reads the residual the blocks before it left:
    - Fourier filter: the dominant rfft frequencies of the training windows (below) are the time-invariant part,
      the others (inverse rfft) the time-variant part.
    - Time-invariant Koopman predictor: each channel's whole time-invariant window is encoded (MLP, ReLU) into
      dynamic_dim, advanced by the block's learned operator (a linear map, initialised orthogonal: U V^T of the SVD of
      a Gaussian matrix), decoded (MLP) into the horizon.
    - Time-variant Koopman predictor: the time-variant window is cut into segments of seg_len steps of all channels
      (front-padded with the window's last points up to a whole number of segments), each encoded (MLP, tanh); the
      operator of least squares from each segment's embedding to the next (DMD) gives the window's reconstruction and
      its rollout over the horizon's segments, both decoded (MLP). multistep: the operator raised to the number of
      horizon segments maps the last ones at once (the official KPLayerApprox). As in the official code, the
      backcast is the first seq_len points of the padded reconstruction (with padding, shifted by it).
    The block's time-variant reconstruction leaves the residual, its two forecasts add to the forecast. The
    encoders and decoders are shared by all blocks; each block has its own time-invariant operator. Defaults are the
    official run.py's but seg_len, which is the horizon as in every official script and TSLib; those scripts use
    seq_len = 2 x horizon.

    The time-invariant frequencies (the official mask_spectrum): the official code computes them from the training
    data before building the model (--alpha 0.2: the int(0.2 x (seq_len // 2 + 1)) frequencies of the largest
    amplitude, summed over the means of its training batches; amplitudes of the globally scaled, not standardised,
    windows). Here run.py gives the built model its training windows once (fit_training_windows), before training
    and before any weights are loaded; the frequencies are a buffer, so a checkpoint keeps the ones it was trained
    with. Built without them (a contract test), the model takes the lowest frequencies.

    Deviations from the official code (and TSLib's port):
    - The statistic is over every training window; the official batches are shuffled and its last incomplete batch
      dropped, so its sum leaves out up to batch_size - 1 random windows (TSLib keeps that batch and weights its
      windows more). Over 3 shuffles of ETTh1 (seq_len 192, 672) and ILI (96) the frequencies were the same.
    - The inverse rfft is taken at the window's length (the official one at 2 x (frequencies - 1), which breaks
      odd seq_len); FFTs and the least squares run in float32 under mixed precision.
    - The least squares use LAPACK's gels on the CPU too (see one_step_operator; the official code on a CPU gets
      torch's default there, gelsy: the same solution for full-rank snapshots, up to rounding).
    - The NaN fallback to the identity operator is a tensor select (no host synchronisation), its message not
      printed. The time-variant decoder decodes reconstruction and forecast in one call.
    - The MLPs' dropout is the --dropout flag (the official MLPs fix 0.05, the default here).
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=True)

    @dataclass
    class Config:
        alpha: float = hparam(ALPHA, "share of the rfft frequencies that form the time-invariant component: those of "
                                     "the largest mean amplitude over the training windows (the official --alpha)",
                              low=0.0, high=1.0)
        dynamic_dim: int = hparam(128, "width of the Koopman embedding", tiny=8, low=1)
        hidden_dim: int = hparam(64, "hidden width of the encoders and decoders", tiny=8, low=1)
        hidden_layers: int = hparam(2, "linear layers of each encoder and decoder", tiny=2, low=2)
        num_blocks: int = hparam(3, "Koopa blocks", tiny=2, low=1)
        seg_len: int = hparam(0, "segment length of the time-variant predictor (0: the horizon, output_token_len, "
                                 "as TSLib and every official script)", low=0)
        multistep: bool = hparam(False, "the time-variant operator raised to the horizon's segments maps the last "
                                        "segments at once (official KPLayerApprox), instead of step by step")
        dropout: float = dropout(0.05)

    def __init__(self, configs):
        super().__init__()
        L, P, C = configs.seq_len, configs.output_token_len, configs.enc_in
        self.horizon, self.multistep = P, configs.multistep
        self.seg_len = configs.seg_len or P
        self.n_segments = math.ceil(L / self.seg_len)  # of the window
        self.n_steps = math.ceil(P / self.seg_len)  # of the horizon
        self.padding = self.seg_len * self.n_segments - L
        if self.n_segments < 2:
            raise ValueError(f"seq_len {L} must exceed seg_len {self.seg_len} (the horizon where seg_len is 0): DMD "
                             "needs two segments of the window")
        self.alpha = configs.alpha
        keep = torch.ones(L // 2 + 1)
        keep[:int(len(keep) * self.alpha)] = 0  # the lowest, until fit_training_windows reads the data's
        self.register_buffer("variant_frequencies", keep)  # in checkpoints: a tested model keeps its own
        D, H, layers, p = configs.dynamic_dim, configs.hidden_dim, configs.hidden_layers, configs.dropout
        self.invariant_encoder = mlp(L, D, H, layers, nn.ReLU(), p)
        self.invariant_decoder = mlp(D, P, H, layers, nn.ReLU(), p)
        self.operators = nn.ModuleList(nn.Linear(D, D, bias=False) for _ in range(configs.num_blocks))
        with torch.no_grad():
            for operator in self.operators:
                U, _, V = torch.svd(torch.randn(D, D))
                operator.weight.copy_(U @ V.T)
        self.variant_encoder = mlp(self.seg_len * C, D, H, layers, nn.Tanh(), p)
        self.variant_decoder = mlp(D, self.seg_len * C, H, layers, nn.Tanh(), p)

    def fit_training_windows(self, batches) -> None:
        """The time-invariant frequencies of the training windows (batches of inputs (n, seq_len, channels)): the
        official mask_spectrum. run.py calls this once, when the model is built, before weights are loaded."""
        keep = torch.ones_like(self.variant_frequencies)
        keep[dominant_frequencies(batches, self.alpha)] = 0
        self.variant_frequencies.copy_(keep)

    def split(self, x: torch.Tensor):
        """(time-variant, time-invariant) parts of x (B, L, C)."""
        spectrum = torch.fft.rfft(x.float(), dim=1)
        variant = torch.fft.irfft(spectrum * self.variant_frequencies[:, None], n=x.shape[1], dim=1)
        return variant, x - variant

    def invariant(self, x: torch.Tensor, operator: nn.Linear) -> torch.Tensor:  # (B, L, C) -> (B, P, C)
        return self.invariant_decoder(operator(self.invariant_encoder(x.transpose(1, 2)))).transpose(1, 2)

    def variant(self, x: torch.Tensor):
        """(backcast (B, L, C), forecast (B, P, C)) of the time-variant part x (B, L, C)."""
        B, L, C = x.shape
        segments = torch.cat([x[:, L - self.padding:], x], dim=1).reshape(B, self.n_segments, -1)
        z = self.variant_encoder(segments).float()  # (B, S, D)
        K = one_step_operator(z)
        reconstruction = torch.cat([z[:, :1], z[:, :-1] @ K], dim=1)
        if not self.multistep:
            ahead = [z[:, -1:] @ K]
            for _ in range(self.n_steps - 1):
                ahead.append(ahead[-1] @ K)
            ahead = torch.cat(ahead, dim=1)
        elif self.n_steps <= self.n_segments:
            ahead = z[:, -self.n_steps:] @ nan_to_identity(torch.linalg.matrix_power(K, self.n_steps))
        else:  # the whole window advanced by S segments at a time
            K_window, ahead = nan_to_identity(torch.linalg.matrix_power(K, self.n_segments)), [z]
            for _ in range(math.ceil(self.n_steps / self.n_segments)):
                ahead.append(ahead[-1] @ K_window)
            ahead = torch.cat(ahead[1:], dim=1)[:, :self.n_steps]
        decoded = self.variant_decoder(torch.cat([reconstruction, ahead], dim=1)).reshape(B, -1, C)
        n_back = self.n_segments * self.seg_len
        return decoded[:, :L], decoded[:, n_back:n_back + self.horizon]

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        x, stats = normalize(x)
        residual, forecast = x, 0
        for operator in self.operators:
            variant, invariant = self.split(residual)
            backcast, variant_forecast = self.variant(variant)
            residual = residual - backcast
            forecast = forecast + (self.invariant(invariant, operator) + variant_forecast)
        return denormalize(forecast, stats)
