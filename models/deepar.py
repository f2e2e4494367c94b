from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, Search, dropout, hparam
from models.layers.outputs import channels_last, split_points

MIN_SCALE = 1e-5  # a window that is zero throughout is scaled by this, not divided by zero


class Model(nn.Module):
    """DeepAR: an autoregressive recurrent network whose output at each step is a distribution of the next value.

    Salinas, Flunkert, Gasthaus, Januschowski. "DeepAR: Probabilistic forecasting with autoregressive recurrent
    networks." International Journal of Forecasting 36(3), 2020. https://arxiv.org/abs/1704.04110
    (reference implementation: GluonTS's DeepAREstimator)

    Every channel is its own series, all sharing the network (the paper trains one model on many series). At
    step t an LSTM reads the value z_t divided by the series' scale, the calendar features of the step it
    predicts (the paper's covariates x_(t+1), known ahead) and the log of the scale (GluonTS's static feature),
    and its output is projected to the next value's distribution: the parameters of the run's loss (--loss
    gaussian, the paper's, or student_t, GluonTS's default; k values per point), multiplied back by the scale.
    Training is the paper's: the likelihood of every next value of the window given the true values before it
    (teacher forcing). A forecast is rolled out one step at a time from the LSTM's state (Capabilities.stateful):
    the mean fed back, or, with --num_samples, each sample path's own draw (the paper's ancestral sampling).

    The scale is the mean absolute value of the window (GluonTS's MeanScaler; the paper's 1 + mean suits
    counts, not standardised data), of the lookback when forecasting. With input_token_len 1 and
    output_token_len 1 (the paper's) a step is one point; larger tokens read input_token_len points per step
    and predict output_token_len. Not offered: the paper's item embedding (the series here are the channels of
    one data set), GluonTS's lagged inputs (the paper feeds z_t alone), and count (negative binomial) outputs.
    """
    capabilities = Capabilities(autoregressive=True, direct=False, covariate=False, token_input=True,
                                time_marks=True, future_marks=True, multi_output=True, stateful=True)

    @dataclass
    class Config:
        hidden_size: int = hparam(40, "LSTM units per layer (GluonTS's default; the paper's experiments: 40)",
                                  tiny=8, low=1, search=Search(choices=(20, 40, 80, 160)))
        num_layers: int = hparam(2, "stacked LSTM layers (GluonTS's default; the paper's: 3)", tiny=1, low=1,
                                 search=Search(1, 4))
        dropout: float = dropout(0.1)

    def __init__(self, configs):
        super().__init__()
        if configs.output_token_len % configs.input_token_len:
            raise ValueError(f"DeepAR continues from its state with each forecast fed back: output_token_len "
                             f"({configs.output_token_len}) must be a multiple of input_token_len "
                             f"({configs.input_token_len})")
        self.token_len, self.n_outputs = configs.input_token_len, configs.n_outputs
        self.rnn = nn.LSTM(self.token_len + 1 + configs.n_marks, configs.hidden_size, configs.num_layers,
                           batch_first=True, dropout=configs.dropout if configs.num_layers > 1 else 0.0)
        self.head = nn.Linear(configs.hidden_size, configs.output_token_len * self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None, state: tuple | None = None):
        """x (B, time, C): a window, or (with the state of an earlier call) the points that follow it; state ()
        starts at a window. Returns the forecast after every token, (B, tokens * output_token_len, C[, k]), and
        with `state` also the state to continue from."""
        B, T, C = x.shape
        series = x.transpose(1, 2).reshape(B * C, T)
        if state:
            *hidden, scale = state
            hidden = tuple(hidden)
        else:
            hidden, scale = None, series.abs().mean(1, keepdim=True).clamp(min=MIN_SCALE)
        tokens = (series / scale).unflatten(1, (-1, self.token_len))  # (B*C, N, input_token_len)
        features = [tokens, scale.log()[:, None].expand(-1, tokens.shape[1], 1)]
        if x_mark is not None:  # the calendar features of each token's first predicted point
            ahead = x_mark[:, self.token_len::self.token_len][:, :tokens.shape[1]]
            features.append(ahead.repeat_interleave(C, dim=0).to(tokens.dtype))
        h, (h_n, c_n) = self.rnn(torch.cat(features, dim=-1), hidden)
        out = channels_last(split_points(self.head(h).reshape(B, C, -1), self.n_outputs))
        out = out * scale.view(B, 1, C, *(1,) * (out.dim() - 3))
        return out if state is None else (out, (h_n, c_n, scale))
