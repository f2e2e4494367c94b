import math
from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, hparam
from models.layers.decomposition import SeriesDecomposition
from models.layers.normalization import RevIN


def mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.LeakyReLU(), nn.Linear(hidden, n_out))


class ComplexLinear(nn.Module):
    """A linear map of complex vectors, its weight and bias stored as real pairs (..., 2) so that every framework
    path (casting, DDP, optimizers) sees real tensors. Initialised as the official nn.Linear(...).to(cfloat): the
    real parts as nn.Linear's (uniform in +-1/sqrt(n_in)), the imaginary parts 0."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        bound = 1 / math.sqrt(n_in)
        self.weight = nn.Parameter(torch.stack([torch.empty(n_out, n_in).uniform_(-bound, bound),
                                                torch.zeros(n_out, n_in)], -1))
        self.bias = nn.Parameter(torch.stack([torch.empty(n_out).uniform_(-bound, bound), torch.zeros(n_out)], -1))

    def forward(self, z: torch.Tensor) -> torch.Tensor:  # (..., n_in) complex -> (..., n_out) complex
        # float32 whatever the parameters' dtype (FSDP's mixed precision gathers them in bf16)
        return z @ torch.view_as_complex(self.weight.float()).T + torch.view_as_complex(self.bias.float())


class Model(nn.Module):
    """Amplifier: energy amplification of the low-energy frequency components, a seasonal-trend MLP forecaster,
    and energy restoration.

    Fei, Yi, Fan, Zhang, Niu. "Amplifier: Bringing Attention to Neglected Low-Energy Components
    in Time Series Forecasting." AAAI 2025. https://arxiv.org/abs/2501.17216 (official code:
    github.com/aikunyi/Amplifier, models/Amplifier.py)

    Each window is RevIN-normalised (learnable per-channel affine). Energy amplification: its real spectrum
    (L // 2 + 1 bins per channel) reversed along frequency, so that the weak high-frequency bins take the place of
    the strong low-frequency ones, is weighted by a learnable per-bin, per-channel mask and added to the spectrum,
    and the sum taken back to time. With sci, the Semi-Channel Interaction block: an MLP across the channels
    extracts one common series, an MLP over time models it, another models each channel's remainder, and the two
    are summed. Seasonal-trend forecaster: a moving-average decomposition, each part mapped to the horizon by an MLP
    over time (hidden_size units, LeakyReLU), the two forecasts summed. Energy restoration: the reversed, masked
    spectrum mapped by a complex linear layer to the horizon's H // 2 + 1 bins is subtracted from the forecast's
    spectrum, which is taken back to time; RevIN is undone.

    Deviations from the official code: the inverse FFTs are told the length (L, then H), so odd lengths work (the
    official irfft returns an even length: a shape error for odd seq_len, H - 1 points for odd horizons; equal
    otherwise); the complex layer's weight is stored as real pairs (same initialisation, the same updates under
    Adam, which treats complex parameters as real pairs); the SCI block's layers exist only with sci (the official
    model builds them unused as well); the moving-average kernel is a flag (the official 25 is fixed); the
    normalisation statistics are not detached (the input carries no gradient).
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=True)  # sci mixes the channels

    @dataclass
    class Config:  # defaults: the official run.py's
        hidden_size: int = hparam(128, "hidden units of the forecaster's MLPs (and of the SCI block's)", tiny=16,
                                  low=1)
        sci: bool = hparam(False, "the Semi-Channel Interaction block: a common series across channels, modelled "
                                  "apart from each channel's remainder (the official --SCI)")
        moving_avg: int = hparam(25, "moving-average window of the seasonal-trend decomposition", tiny=5, low=1)

    def __init__(self, configs):
        super().__init__()
        L, H, C, hidden = configs.seq_len, configs.output_token_len, configs.enc_in, configs.hidden_size
        self.seq_len, self.horizon = L, H
        self.revin = RevIN(C, inverse_eps=1e-10)  # the official eps^2
        self.decomposition = SeriesDecomposition(configs.moving_avg)
        self.amplify = nn.Parameter(torch.ones(L // 2 + 1, C))
        self.restore = ComplexLinear(L // 2 + 1, H // 2 + 1)
        self.seasonal = mlp(L, hidden, H)
        self.trend = mlp(L, hidden, H)
        if configs.sci:
            self.common = mlp(C, C, 1)
            self.common_over_time = mlp(L, hidden, L)
            self.specific_over_time = mlp(L, hidden, L)
        self.sci = configs.sci

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        x, stats = self.revin.normalize(x)
        spectrum = torch.fft.rfft(x.float(), dim=1)  # (B, L // 2 + 1, C); FFTs in float32 under autocast too
        flipped = spectrum.flip(1) * self.amplify.float()
        x = torch.fft.irfft(spectrum + flipped, n=self.seq_len, dim=1).transpose(1, 2)  # (B, C, L)
        if self.sci:
            common = self.common_over_time(self.common(x.transpose(1, 2)).transpose(1, 2))  # (B, 1, L)
            x = self.specific_over_time(x - common) + common
        seasonal, trend = self.decomposition(x)
        out = self.seasonal(seasonal) + self.trend(trend)  # (B, C, H)
        restored = torch.fft.rfft(out.float(), dim=-1) - self.restore(flipped.transpose(1, 2))
        out = torch.fft.irfft(restored, n=self.horizon, dim=-1).transpose(1, 2)
        return self.revin.denormalize(out, stats)
