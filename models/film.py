from dataclasses import dataclass

import numpy as np
import torch
from scipy import linalg, special
from torch import nn

from models.base import Capabilities, hparam, revin
from models.layers.normalization import RevIN
from models.layers.outputs import channels_last

MULTISCALE = (1, 2, 4)  # each expert reads the last multiple x horizon points of the window (TSLib's, the official's)


def legendre_memory(order: int, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) of the discrete Legendre memory c_t = A c_{t-1} + B f_t: HiPPO-LegT in the LMU normalisation
    (Voelker et al. 2019; Gu et al., HiPPO, NeurIPS 2020), discretised with step dt by the bilinear transform, in
    float64. Both codes call scipy.signal.cont2discrete(method="bilinear"); these are its two solves (importing
    scipy.signal costs over a second)."""
    q = np.arange(order, dtype=np.float64)
    row, col = q[:, None], q[None, :]
    a = np.where(row < col, -1.0, (-1.0) ** (row - col + 1)) * (2 * row + 1)
    b = (-1.0) ** q * (2 * q + 1)
    left = np.eye(order) - 0.5 * dt * a
    return linalg.solve(left, np.eye(order) + 0.5 * dt * a), linalg.solve(left, dt * b)


class LegendreExpert(nn.Module):
    """One expert of FiLM: the Legendre memory of the window's last `length` points, a Fourier layer over the
    sequence of memory states (a learned complex N x N matrix on each of the lowest modes), and the filtered state at
    one time step read out as the horizon's points through the Legendre polynomials.

    The L states c_0 .. c_{L-1} (TSLib runs the recurrence for L steps) are never formed: the Fourier layer keeps
    only their first M DFT coefficients, and the recurrence gives those in closed form. Summing c_s = A c_{s-1} + B f_s
    (c_{-1} = 0) against w^(ms), w = exp(-2 pi i / L), gives (I - w^m A) X_m = B F_m - A c_{L-1}, with F the DFT of
    the input and c_{L-1} = sum_u A^(L-1-u) B f_u the last state. The layer's inverse DFT is then needed at the one
    time step read, t: a weighted sum over the modes. Everything but the learned matrices is a constant of the task,
    computed once in float64, so the expert is four matrix products and an rFFT, equal to TSLib's up to float
    rounding, without its L sequential steps or its (batch, channels, N, L) states.
    """

    def __init__(self, seq_len: int, horizon: int, multiple: int, order: int, modes: int):
        super().__init__()
        self.length = length = min(seq_len, multiple * horizon)
        dt = 1.0 / horizon / multiple
        a, b = legendre_memory(order, dt)
        self.modes = m = min(modes, min(seq_len, horizon) // 2)  # TSLib's (and the official) cap
        # the filtered state read: at step horizon - 1 as TSLib reads it, the last where the window is shorter
        t = horizon - 1 if seq_len >= horizon else length - 1
        steps = np.empty((length, order))  # row u: A^(L-1-u) B, the weight of input u in the last state
        v = b
        for u in reversed(range(length)):
            steps[u] = v
            v = a @ v
        k = np.arange(m)
        w = np.exp(-2j * np.pi * k / length)
        # (I - w^m A)^-1 [A | B] for each mode m: (M, N, N + 1)
        solved = np.linalg.solve(np.eye(order) - w[:, None, None] * a, np.concatenate([a, b[:, None]], 1)[None])
        # irfft at t: (1/L)(Re Y_0 + 2 sum_m Re(Y_m e^(2 pi i m t / L))); m < L/2 always, so no Nyquist term
        phase = np.where(k == 0, 1.0, 2.0) * np.exp(2j * np.pi * k * t / length) / length
        input_modes = phase[:, None] * solved[..., order]  # (M, N): X_m's part from F_m, with the readout's phase
        state_modes = phase[:, None, None] * solved[..., :order]  # (M, N, N): X_m's part from -c_{L-1}
        # Of the products X_m W_m only the real part is read: Re(X) W_re - Im(X) W_im, one real product over
        # (re/im, mode, Legendre index) against the weight stacked as (2, M, N, N)
        state_modes = np.stack([state_modes.real, -state_modes.imag])  # (2, M, N_i, N_j)
        legendre = special.eval_legendre(np.arange(order)[:, None], 1 - 2 * np.arange(0.0, 1.0, dt)).T
        self.register_buffer("last_state", torch.tensor(steps, dtype=torch.float32), persistent=False)
        self.register_buffer("input_modes", torch.tensor(np.stack([input_modes.real, input_modes.imag]),
                                                         dtype=torch.float32), persistent=False)
        self.register_buffer("state_modes", torch.tensor(state_modes.transpose(3, 0, 1, 2).reshape(order, -1),
                                                         dtype=torch.float32), persistent=False)
        # the horizon's points: the last `horizon` of the memory's evaluation grid
        self.register_buffer("readout", torch.tensor(legendre[-horizon:].T, dtype=torch.float32), persistent=False)
        # real and imaginary parts uniform on [0, 1 / N^2), as both codes
        self.weight = nn.Parameter(torch.rand(2, m, order, order) / (order * order))

    def forward(self, series: torch.Tensor) -> torch.Tensor:  # (..., seq_len) -> (..., horizon)
        f = series[..., -self.length:]
        spectrum = torch.fft.rfft(f, dim=-1)[..., :self.modes, None]  # (..., M, 1)
        re, im = spectrum.real, spectrum.imag
        b_re, b_im = self.input_modes
        from_input = torch.stack([re * b_re - im * b_im, -(im * b_re + re * b_im)], dim=-3).flatten(-3)
        z = from_input - (f @ self.last_state) @ self.state_modes  # (..., 2 M N): Re X, -Im X
        return (z @ self.weight.flatten(0, 2)) @ self.readout


class Model(nn.Module):
    """FiLM: Frequency improved Legendre Memory model.

    Zhou, Ma, Wang, Wen, Sun, Yao, Yin, Jin. "FiLM: Frequency improved Legendre Memory Model for Long-term Time Series
    Forecasting." NeurIPS 2022. https://arxiv.org/abs/2205.08897 (official code: github.com/tianzhou2011/FiLM;
    TSLib's models/FiLM.py)

    Each channel is forecast alone. Three experts read the window's last 1, 2 and 4 horizons of points (all of it
    when shorter): each projects them on a Legendre memory of order N (HiPPO-LegT, time step 1 / (multiple x
    horizon)), filters the sequence of memory states by a learned complex matrix on each of its lowest `modes`
    Fourier modes (the Frequency Enhanced Layer), and reconstructs the horizon from the filtered state through the
    Legendre polynomials (LegendreExpert). A linear map mixes the experts' forecasts (one weight each and a bias; k
    outputs with n_outputs k). RevIN, with its learned per-channel affine, wraps the model (--revin; TSLib always,
    the official code under --ours, which its scripts pass for every dataset but ETTh1 and Exchange's horizon 720).

    Deviations from TSLib's (and the official) code:
    - The experts compute in closed form what TSLib computes by running the memory over every step
      (LegendreExpert): the same forecast to float rounding, the task's constants in float64.
    - `modes` and `legendre_order` are flags: TSLib fixes 32 and 256 (the official --modes1, default 64, and
      window_size 256). Its mode cap min(modes, min(seq_len, horizon) // 2) is kept, so the official ETTh1 scripts'
      --modes1 1032 is every mode: --modes 1032.
    - Not implemented: the official variants no script of the paper's tables uses, the low-rank weights
      (--version), the randomly chosen modes (--mode_type), and the 1x1 convolutions it puts around the model for
      more than 1000 channels.
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=False,  # channel-independent
                                multi_output=True)

    @dataclass
    class Config:
        modes: int = hparam(32, "Fourier modes each expert keeps of its memory states: the lowest min(modes, "
                                "min(seq_len, horizon) // 2)", tiny=4, low=1)
        legendre_order: int = hparam(256, "order N of the Legendre memory (the official window_size)", tiny=16, low=1)
        revin: bool = revin(True)

    def __init__(self, configs):
        super().__init__()
        if min(configs.seq_len, configs.output_token_len) < 2:
            raise ValueError("FiLM needs a seq_len and a horizon of at least 2 (one Fourier mode)")
        self.n_outputs = configs.n_outputs
        self.revin = RevIN(configs.enc_in, inverse_eps=1e-10) if configs.revin else None
        self.experts = nn.ModuleList(
            LegendreExpert(configs.seq_len, configs.output_token_len, multiple, configs.legendre_order, configs.modes)
            for multiple in MULTISCALE)
        self.mix = nn.Linear(len(MULTISCALE), self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.revin is not None:
            x, stats = self.revin.normalize(x)
        series = x.transpose(1, 2)  # (B, C, L)
        out = self.mix(torch.stack([expert(series) for expert in self.experts], dim=-1))  # (B, C, H, k)
        out = channels_last(out.squeeze(-1) if self.n_outputs == 1 else out)
        return self.revin.denormalize(out, stats) if self.revin is not None else out
