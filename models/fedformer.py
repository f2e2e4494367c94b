from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, hparam
from models.layers.seasonal_trend import DecompositionConfig, DecompositionTransformer, HeadMixing


def frequency_modes(length: int, modes: int, mode_select: str) -> torch.Tensor:
    """Sorted indices of min(modes, length // 2) of the frequencies 0 .. length // 2 - 1: drawn at random (from
    torch's global generator, which the framework seeds) or the lowest."""
    count = min(modes, length // 2)
    index = torch.randperm(length // 2)[:count] if mode_select == "random" else torch.arange(count)
    return index.sort().values


def complex_weight(n_heads: int, head_width: int, modes: int, d_model: int) -> nn.Parameter:
    """Per head and mode a (head_width x head_width) complex matrix, real and imaginary parts uniform on
    [0, 1 / d_model^2) as the official torch.rand(..., dtype=cfloat) scaled; stored as real pairs."""
    return nn.Parameter(torch.rand(n_heads, head_width, head_width, modes, 2) / (d_model * d_model))


def time_major(x: torch.Tensor) -> torch.Tensor:
    """The official view of a (B, H, E, L) result as (B, L, H * E): a reshape without transposing back, which
    mixes time and features (github.com/MAZiqing/FEDformer/issues/16); kept, as the published numbers have it."""
    B, H, E, L = x.shape
    return x.reshape(B, L, H * E)


class FourierBlock(nn.Module):
    """FEB-f (frequency enhanced block): the queries' Fourier coefficients at the selected modes, each multiplied
    by a learned complex matrix per head, transformed back. As the official code, the output of the m-th
    selected mode is written to frequency m, so the output holds the lowest len(index) frequencies."""

    def __init__(self, d_model: int, n_heads: int, length: int, modes: int, mode_select: str):
        super().__init__()
        self.register_buffer("index", frequency_modes(length, modes, mode_select))  # saved: reloads the same modes
        self.weight = complex_weight(n_heads, d_model // n_heads, len(self.index), d_model)

    def forward(self, q: torch.Tensor, k: None, v: None) -> torch.Tensor:  # reads the queries only
        L = q.shape[1]
        spectrum = torch.fft.rfft(q.float().permute(0, 2, 3, 1), dim=-1)[..., self.index]  # (B, H, E, modes)
        mixed = torch.einsum("bhim,hiom->bhom", spectrum, torch.view_as_complex(self.weight))
        return time_major(torch.fft.irfft(mixed, n=L))  # frequencies above the modes: zero


class FourierCrossAttention(nn.Module):
    """FEA-f (frequency enhanced attention): queries' and keys' Fourier coefficients at their selected modes,
    attention scores between modes through the complex tanh, the keys' coefficients (also the values) weighted
    by them, a learned complex matrix per head and mode, written back to the queries' modes, divided by d_model^2
    and transformed back."""

    def __init__(self, d_model: int, n_heads: int, length_q: int, length_kv: int, modes: int, mode_select: str):
        super().__init__()
        self.register_buffer("index_q", frequency_modes(length_q, modes, mode_select))
        self.register_buffer("index_kv", frequency_modes(length_kv, modes, mode_select))
        self.weight = complex_weight(n_heads, d_model // n_heads, len(self.index_q), d_model)
        self.scale = 1 / (d_model * d_model)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: None) -> torch.Tensor:  # the keys are the values
        B, L, H, E = q.shape
        q_modes = torch.fft.rfft(q.float().permute(0, 2, 3, 1), dim=-1)[..., self.index_q]  # (B, H, E, Mq)
        k_modes = torch.fft.rfft(k.float().permute(0, 2, 3, 1), dim=-1)[..., self.index_kv]  # (B, H, E, Mkv)
        scores = torch.einsum("bhex,bhey->bhxy", q_modes, k_modes).tanh()
        mixed = torch.einsum("bhxy,bhey->bhex", scores, k_modes)
        mixed = torch.einsum("bhex,heox->bhox", mixed, torch.view_as_complex(self.weight))
        spectrum = mixed.new_zeros(B, H, E, L // 2 + 1)
        spectrum[..., self.index_q] = mixed * self.scale
        return time_major(torch.fft.irfft(spectrum, n=L))


class Model(nn.Module):
    """FEDformer (Fourier version, FEDformer-f): Autoformer's decomposition encoder-decoder with attention replaced
    by frequency enhanced blocks on a subset of Fourier modes.

    Zhou, Ma, Wen, Wang, Sun, Jin. "FEDformer: Frequency Enhanced Decomposed Transformer for Long-term Series
    Forecasting." ICML 2022. https://arxiv.org/abs/2201.12740 (official code: github.com/MAZiqing/FEDformer)

    Encoder self-attention and decoder self-attention are Fourier blocks on `modes` modes of their length, the
    decoder's cross-attention a Fourier cross-attention (models.layers.seasonal_trend has the rest). The modes
    are drawn at construction ('random', the official default) or the lowest ('low'), and saved as buffers.
    As the official code, all encoder layers share one Fourier block (weights and modes), all decoder layers
    one self- and one cross-block; each layer has its own projections. Defaults are the official run.py's.

    Deviations from the official code:
    - moving_avg is one kernel, 25 as TSLib (the official default is the list [24], one kernel in its
      series_decomp_multi: `--moving_avg 24` is that, padded 12 points before and 11 after as there).
    - The decoder's modes are drawn from its actual length, label_len + horizon; the official code uses
      seq_len // 2 + horizon (the same with its label_len = seq_len // 2 in every script).
    - Random modes come from torch's global generator (seeded by the framework), not numpy's.
    - The projections of keys and values that the official blocks never read (values everywhere, keys in the
      self-attention blocks) are left out: they have no effect and would leave DDP parameters without gradient.
    - The blocks work on all modes at once (the official code loops over them); FFTs run in float32 under
      mixed precision; the complex weights are stored as real (real, imaginary) pairs.
    TSLib's port differs from the official code in ways not followed here: it adds positional embeddings,
    applies tanh to real and imaginary parts separately, and defaults to 32 modes.
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=True, time_marks=True,
                                future_marks=True, multi_output=True)

    @dataclass
    class Config(DecompositionConfig):
        modes: int = hparam(64, "Fourier modes kept by each frequency enhanced block", tiny=4, low=1)
        mode_select: str = hparam("random", "which Fourier modes: drawn at random once at construction, or the "
                                            "lowest", choices=("random", "low"))

    def __init__(self, configs):
        super().__init__()
        D, H, modes, select = configs.d_model, configs.n_heads, configs.modes, configs.mode_select
        decoder_len = configs.label_len + configs.output_token_len
        encoder_block = FourierBlock(D, H, configs.seq_len, modes, select)
        decoder_block = FourierBlock(D, H, decoder_len, modes, select)
        cross_block = FourierCrossAttention(D, H, decoder_len, configs.seq_len, modes, select)
        self.network = DecompositionTransformer(
            configs,
            lambda: HeadMixing(encoder_block, D, H, keys=False, values=False),
            lambda: HeadMixing(decoder_block, D, H, keys=False, values=False),
            lambda: HeadMixing(cross_block, D, H, keys=True, values=False))

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        return self.network(x, x_mark)
