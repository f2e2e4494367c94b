from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, d_model, hparam, use_norm
from models.layers.normalization import denormalize
from models.layers.outputs import channels_last, split_points


class Model(nn.Module):
    """CycleNet: residual cycle forecasting, a learnable recurrent cycle per channel removed before a linear
    layer or MLP and added back to its forecast.

    Lin, Lin, Hu, Wu, Mo, Zhong. "CycleNet: Enhancing Time Series Forecasting through Modeling Periodic
    Patterns." NeurIPS 2024 (spotlight). https://arxiv.org/abs/2409.18479
    (official code: github.com/ACAT-SCUT/CycleNet, models/CycleNet.py)

    A zero-initialised table Q (cycle, channels) is learned with the forecaster. Each window, standardised per
    channel (use_norm), has Q's values at its points' phases subtracted; one map over time shared by all
    channels (model_type linear: one linear layer; mlp: Linear-ReLU-Linear with d_model hidden units)
    forecasts the residual; Q's values at the horizon's phases are added and the standardisation undone.

    The phase of a point is its row in the whole series modulo `cycle`, taken from `position` (the row of the
    window's first point), so forward needs `position`. The official loader passes the phase of the first
    forecast point (row + seq_len) and the model reads it as the first input point's: the same computation
    with Q's rows relabelled by seq_len mod cycle. As Q starts at zero, training is identical up to that
    relabelling; here Q's row k is the phase k of the series. Otherwise the computation and initialisation
    (torch defaults; the unbiased variance of the official instance norm) are the official code's.
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=False, positions=True,
                                multi_output=True)
    # covariate=False: Q is per channel and the backbone channel-independent, so channels never meet

    @dataclass
    class Config:
        cycle: int = hparam(24, "length of the learnable recurrent cycle, in time steps (the data's period: "
                                "24 hourly ETT, 96 15-min ETT, 168 Electricity/Traffic, 144 Weather/Solar)",
                            tiny=4, low=1)
        model_type: str = hparam("mlp", "the map over time: one linear layer, or an MLP (Linear-ReLU-Linear, d_model "
                                         "hidden units)", choices=("linear", "mlp"))
        d_model: int = d_model()  # hidden width of the mlp backbone only
        use_norm: bool = use_norm(True)

    def __init__(self, configs):
        super().__init__()
        L, H = configs.seq_len, configs.output_token_len
        self.seq_len, self.horizon, self.use_norm, self.n_outputs = L, H, configs.use_norm, configs.n_outputs
        self.cycle = nn.Parameter(torch.zeros(configs.cycle, configs.enc_in))
        if configs.model_type == "linear":
            self.backbone = nn.Linear(L, H * self.n_outputs)
        else:
            self.backbone = nn.Sequential(nn.Linear(L, configs.d_model), nn.ReLU(),
                                          nn.Linear(configs.d_model, H * self.n_outputs))

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None,
                position: torch.Tensor | None = None) -> torch.Tensor:
        if position is None:
            raise ValueError("CycleNet needs `position` (the row of each window's first point in the series) "
                             "to know the phase of the cycle")
        if self.use_norm:
            mean = x.mean(1, keepdim=True)
            std = torch.sqrt(x.var(1, keepdim=True) + 1e-5)  # unbiased, as the official code
            x = (x - mean) / std
        W = self.cycle.shape[0]
        steps = torch.arange(self.seq_len + self.horizon, device=x.device)
        cyc = self.cycle[(position.view(-1, 1) % W + steps) % W]  # (B, seq_len + horizon, channels)
        y = channels_last(split_points(self.backbone((x - cyc[:, :self.seq_len]).transpose(1, 2)), self.n_outputs))
        future = cyc[:, self.seq_len:]
        y = y + (future[..., None] if self.n_outputs > 1 else future)  # the cycle added to each of the k
        return denormalize(y, (mean, std)) if self.use_norm else y
