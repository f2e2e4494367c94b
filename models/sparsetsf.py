from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, d_model, hparam
from models.layers.outputs import channels_last, split_points


class Model(nn.Module):
    """SparseTSF: cross-period sparse forecasting, one small map shared by every phase of the period.

    Lin, Lin, Wu, Chen, Yang. "SparseTSF: Modeling Long-term Time Series Forecasting with 1k Parameters."
    ICML 2024. https://arxiv.org/abs/2405.00946 (official code: github.com/lss-1138/SparseTSF)

    Each channel's window, minus its mean, is smoothed by a residual sliding aggregation (a width
    1 + 2*(period_len // 2) convolution, zero-padded, no bias) and cut into its period_len phases: the
    seq_len / period_len points of each phase are mapped to output_token_len / period_len points by one
    linear layer without bias (model_type linear, the paper's), or by Linear-ReLU-Linear with d_model
    hidden units (model_type mlp: SparseTSF/MLP, added to the official code in October 2024); the
    phases are interleaved back into the forecast and the mean is added back.

    Computation and initialisation (torch defaults) as in the official code; none of its behaviour is changed.
    """
    capabilities = Capabilities(direct=True, covariate=False, multi_output=True)  # channel-independent

    @dataclass
    class Config:
        period_len: int = hparam(24, "period of the data: seq_len and the horizon must be multiples of it",
                                 tiny=4, low=1)
        model_type: str = hparam("linear", "the map across periods: one linear layer (the paper's) or an MLP",
                                 choices=("linear", "mlp"))
        d_model: int = d_model(128)  # hidden width of the mlp variant only

    def __init__(self, configs):
        super().__init__()
        w, L, H = configs.period_len, configs.seq_len, configs.output_token_len
        if L % w or H % w:
            raise ValueError(f"SparseTSF needs seq_len ({L}) and output_token_len ({H}) to be multiples of "
                             f"period_len ({w})")
        self.period_len, self.n_outputs = w, configs.n_outputs
        M = H // w * self.n_outputs  # forecast points of each phase, k values each
        self.aggregate = nn.Conv1d(1, 1, kernel_size=1 + 2 * (w // 2), padding=w // 2, bias=False)
        if configs.model_type == "linear":
            self.forecast = nn.Linear(L // w, M, bias=False)
        else:
            self.forecast = nn.Sequential(nn.Linear(L // w, configs.d_model), nn.ReLU(),
                                          nn.Linear(configs.d_model, M))

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        B, L, C = x.shape
        mean = x.mean(1, keepdim=True)
        series = (x - mean).transpose(1, 2).reshape(B * C, 1, L)
        series = self.aggregate(series) + series
        # (B*C, L) -> (B*C, period_len, periods): one row per phase, its points one period apart
        phases = series.reshape(B * C, L // self.period_len, self.period_len).transpose(1, 2)
        y = split_points(self.forecast(phases), self.n_outputs).transpose(1, 2)  # (B*C, periods, period_len[, k])
        y = channels_last(y.reshape(B, C, -1, *y.shape[3:]))
        return y + (mean[..., None] if self.n_outputs > 1 else mean)  # the mean added to each of the k
