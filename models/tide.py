from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, d_model, dropout, e_layers, hparam, revin
from models.layers.dropout import Dropout
from models.layers.linear import dense
from models.layers.normalization import RevIN
from models.layers.outputs import channels_last, split_points


class ResidualBlock(nn.Module):
    """TiDE's residual block: dense + ReLU, dense, dropout, plus a linear skip, then (optionally) LayerNorm over
    each group of norm_width adjacent outputs (default: all out_dim together)."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, dropout: float, layer_norm: bool,
                 norm_width: int | None = None):
        super().__init__()
        self.fc1, self.fc2, self.skip = dense(in_dim, hidden), dense(hidden, out_dim), dense(in_dim, out_dim)
        self.dropout = Dropout(dropout)
        self.norm_width = norm_width or out_dim
        self.norm = nn.LayerNorm(self.norm_width, eps=1e-3) if layer_norm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dropout(self.fc2(F.relu(self.fc1(x)))) + self.skip(x)
        if y.shape[-1] == self.norm_width:
            return self.norm(y)
        return self.norm(y.unflatten(-1, (-1, self.norm_width))).flatten(-2)


def dense_stack(in_dim: int, widths: list, dropout: float, layer_norm: bool) -> nn.Module:
    """The official _make_dnn_residual: one dense layer to widths[-1] when there is one width, else a residual
    block from each width to the next (block i has widths[i] hidden units), the first taking in_dim."""
    if len(widths) < 2:
        return dense(in_dim, widths[-1])
    return nn.Sequential(*(ResidualBlock(in_dim if i == 0 else widths[i], widths[i], widths[i + 1], dropout,
                                         layer_norm) for i in range(len(widths) - 1)))


class Model(nn.Module):
    """TiDE: a channel-independent dense encoder-decoder of residual MLP blocks with a linear skip over time.

    Das, Kong, Leach, Mathur, Sen, Yu. "Long-term Forecasting with TiDE: Time-series Dense Encoder." TMLR 2023.
    https://arxiv.org/abs/2304.08424 (official code: google-research/google-research, tide/models.py, TensorFlow)

    Each channel's window (RevIN-normalised with learnable per-channel affine when revin) is concatenated
    with the calendar covariates of the window, each time step projected to feature_dim by a residual block
    and flattened (feature-major, as the official code), and with a learned embedding of the channel (the
    official per-series embedding, its static attribute). The dense encoder (e_layers layers of width
    d_model) and the dense decoder (d_layers layers, the last of width decoder_output_dim x horizon) give a
    decoder_output_dim vector per horizon step (reshaped (dim, horizon) as the official code). Layers count
    as the official num_layers (the paper's numEncoderLayers / numDecoderLayers): 1 is one dense layer, n > 1
    is n-1 residual blocks. The temporal decoder, a residual block with temporal_hidden units shared by the
    steps, maps each vector to one value, and a linear map from the window to the horizon (the global
    residual) is added. Layers start as Keras's (Glorot-uniform weights, zero biases). Defaults are the
    official train.py's flag defaults (its scripts set layer_norm and, for ETTh1, RevIN).

    Deviations from the official code:
    - The framework gives the covariates of the window only, not of the horizon, so the encoder sees the
      projected covariates of the window (not of window + horizon) and the temporal decoder gets only the
      decoded vectors (not the projected covariates of each horizon step). With no calendar features
      (n_marks 0) the feature projection is left out. The covariates are the framework's calendar features
      (x_mark), not the official time covariates (7 calendar fields, 18 holiday distances with --holiday).
    - The official code applies LayerNorm (layer_norm) to the temporal decoder's one-wide output too, which
      turns it into a constant (a single value normalised is 0, plus the norm's shift), so the encoder-decoder
      contributes nothing and the forecast is the linear residual plus a learned constant
      (google-research/google-research issue 2133; TSLib's port does the same). Here the temporal decoder
      skips its LayerNorm, so its output reaches the forecast; scalar_norm restores the official behaviour
      (to reproduce the published numbers).
    - k values per point (n_outputs): the temporal decoder maps each step's vector to k values and the global
      residual maps the window to k per step (as Darts' probabilistic TiDE); scalar_norm normalises each of the
      k values alone, as the one value of a point forecast.
    - RevIN (models.layers.normalization): eps 1e-5 inside the standard deviation's square root, where the official
      code replaces a zero standard deviation by 1.
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=False, time_marks=True,
                                multi_output=True)

    @dataclass
    class Config:
        d_model: int = d_model(256)
        e_layers: int = e_layers(2)
        d_layers: int = hparam(2, "number of decoder layers", tiny=2, low=1)
        decoder_output_dim: int = hparam(4, "width of the decoded vector of each horizon step", tiny=4, low=1)
        temporal_hidden: int = hparam(64, "hidden width of the temporal decoder", tiny=8, low=1)
        feature_dim: int = hparam(4, "width each time step's calendar features are projected to", tiny=2, low=1)
        feature_hidden: int = hparam(64, "hidden width of the calendar-feature projection", tiny=8, low=1)
        channel_embed: int = hparam(16, "width of the learned per-channel embedding fed to the encoder (0: none)",
                                    tiny=4, low=0)
        dropout: float = dropout(0.0)
        layer_norm: bool = hparam(False, "LayerNorm at the end of each residual block", tiny=True)
        scalar_norm: bool = hparam(False, "with layer_norm, LayerNorm the temporal decoder's one-wide output too, "
                                          "as the official code (it turns that output into a learned constant)")
        revin: bool = revin()

    def __init__(self, configs):
        super().__init__()
        L, H, C, k = configs.seq_len, configs.output_token_len, configs.enc_in, configs.n_outputs
        D, p, drop, ln = configs.d_model, configs.decoder_output_dim, configs.dropout, configs.layer_norm
        self.horizon, self.decoder_output_dim, self.n_outputs = H, p, k
        self.revin = RevIN(C, inverse_eps=1e-7) if configs.revin else None
        self.features = (ResidualBlock(configs.n_marks, configs.feature_hidden, configs.feature_dim, drop, ln)
                         if configs.n_marks else None)
        self.channel_embedding = None
        if configs.channel_embed:
            self.channel_embedding = nn.Parameter(torch.empty(C, configs.channel_embed).uniform_(-0.05, 0.05))
        in_dim = L + (L * configs.feature_dim if self.features else 0) + configs.channel_embed
        self.encoder = dense_stack(in_dim, [D] * configs.e_layers, drop, ln)
        self.decoder = dense_stack(D, [D] * (configs.d_layers - 1) + [p * H], drop, ln)
        # a LayerNorm over one feature outputs its shift whatever the input (see the Model docstring); each of the
        # k values is normalised alone, as the point forecast's one value
        self.temporal_decoder = ResidualBlock(p, configs.temporal_hidden, k, drop, ln and configs.scalar_norm,
                                              norm_width=1)
        self.residual = dense(L, H * k)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.revin is not None:
            x, stats = self.revin.normalize(x)
        B, _, C = x.shape
        series = x.transpose(1, 2)  # (B, C, L): every channel its own series
        parts = [series]
        if self.features is not None:
            if x_mark is None:
                raise ValueError("TiDE was built with calendar features (n_marks > 0) but got no x_mark")
            projected = self.features(x_mark).transpose(1, 2).flatten(1)  # (B, feature_dim * L), feature-major
            parts.append(projected[:, None].expand(B, C, -1))
        if self.channel_embedding is not None:
            parts.append(self.channel_embedding.expand(B, C, -1))
        decoded = self.decoder(self.encoder(torch.cat(parts, dim=-1)))  # (B, C, p * H)
        decoded = decoded.view(B, C, self.decoder_output_dim, self.horizon).transpose(-1, -2)  # (B, C, H, p)
        # (B, C, H * k), point-major as the residual's
        out = self.temporal_decoder(decoded).flatten(-2) + self.residual(series)
        out = channels_last(split_points(out, self.n_outputs))
        return self.revin.denormalize(out, stats) if self.revin is not None else out
