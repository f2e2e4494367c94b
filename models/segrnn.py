from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, d_model, dropout, hparam, use_norm
from models.layers.dropout import Dropout
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points


class Model(nn.Module):
    """SegRNN: a GRU over segments of the window, decoding every output segment in parallel.

    Lin, Lin, Wu, Zhao, Mo, Zhang. "SegRNN: Segment Recurrent Neural Network for Long-Term Time Series
    Forecasting." arXiv 2023 (IEEE Internet of Things Journal 2026). https://arxiv.org/abs/2308.11200
    (official code: github.com/lss-1138/SegRNN)

    Each channel's window, minus its last value (or standardised, use_norm: the official --revin), is
    cut into segments of seg_len points, each embedded by Linear + ReLU; one GRU layer reads the
    segments and its final state seeds the decoding. Parallel multi-step forecasting (PMF, dec_way pmf):
    one GRU step per output segment from that state, its input the concatenation of a learnable segment
    position embedding and a learnable channel embedding, then dropout and Linear(d_model, seg_len).
    Recurrent multi-step forecasting (rmf, the paper's ablation) instead feeds each predicted segment,
    re-embedded, back into the GRU. The last value (or the statistics) are added back.

    As the official code with its defaults (rnn_type gru, channel_id 1); not offered: its RNN/LSTM
    ablations and PMF without the channel embedding. For an odd d_model the position embedding takes the
    extra unit (the official code needs an even d_model). k values per point (n_outputs) with pmf only: rmf feeds
    each predicted segment back as the next input, which takes a point forecast.
    """
    capabilities = Capabilities(direct=True, covariate=False,  # channel-independent (per-channel embedding only)
                                multi_output=True)

    @dataclass
    class Config:
        seg_len: int = hparam(48, "points per segment: seq_len and the horizon must be multiples of it",
                              tiny=4, low=1)
        d_model: int = d_model()
        dropout: float = dropout(0.5)
        dec_way: str = hparam("pmf", "decoding: parallel (pmf, the paper's) or recurrent (rmf) multi-step",
                              choices=("pmf", "rmf"))
        use_norm: bool = use_norm()

    def __init__(self, configs):
        super().__init__()
        w, L, H, D = configs.seg_len, configs.seq_len, configs.output_token_len, configs.d_model
        if L % w or H % w:
            raise ValueError(f"SegRNN needs seq_len ({L}) and output_token_len ({H}) to be multiples of "
                             f"seg_len ({w})")
        if configs.dec_way == "rmf" and configs.n_outputs > 1:
            raise ValueError(f"SegRNN's rmf decoding feeds its point forecast back, so it cannot give n_outputs "
                             f"({configs.n_outputs}) values per point; use dec_way pmf")
        self.seg_len, self.out_segments, self.use_norm, self.dec_way = w, H // w, configs.use_norm, configs.dec_way
        self.n_outputs = configs.n_outputs
        self.embed = nn.Sequential(nn.Linear(w, D), nn.ReLU())
        self.rnn = nn.GRU(D, D, batch_first=True)
        if self.dec_way == "pmf":
            self.position = nn.Parameter(torch.randn(self.out_segments, D - D // 2))
            self.channel = nn.Parameter(torch.randn(configs.enc_in, D // 2))
        self.predict = nn.Sequential(Dropout(configs.dropout), nn.Linear(D, w * self.n_outputs))

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        B, L, C = x.shape
        if self.use_norm:
            x, stats = normalize(x)
        else:
            last = x[:, -1:]
            x = x - last
        segments = x.transpose(1, 2).reshape(B * C, L // self.seg_len, self.seg_len)
        _, h = self.rnn(self.embed(segments))  # h: (1, B*C, D), the state after the last segment
        y = self.parallel(h, B, C) if self.dec_way == "pmf" else self.recurrent(h)
        y = split_points(y, self.n_outputs)  # (B*C, M, seg_len[, k])
        y = channels_last(y.reshape(B, C, -1, *y.shape[3:]))
        if self.use_norm:
            return denormalize(y, stats)
        return y + (last[..., None] if self.n_outputs > 1 else last)  # the last value added to each of the k

    def parallel(self, h: torch.Tensor, B: int, C: int) -> torch.Tensor:
        """One GRU step per (series, output segment) pair, all from the encoder's state: (B*C, M, seg_len * k)."""
        M, D = self.out_segments, h.shape[-1]
        queries = torch.cat([self.position.expand(C, M, -1), self.channel[:, None].expand(C, M, -1)], dim=-1)
        queries = queries.expand(B, C, M, D).reshape(B * C * M, 1, D)
        _, h = self.rnn(queries, h.repeat_interleave(M, dim=1))
        return self.predict(h[0]).view(B * C, M, -1)

    def recurrent(self, h: torch.Tensor) -> torch.Tensor:
        """Each predicted segment, embedded again, is the GRU's next input: (B*C, M, seg_len)."""
        out = [self.predict(h[0])]
        for _ in range(self.out_segments - 1):
            _, h = self.rnn(self.embed(out[-1])[:, None], h)
            out.append(self.predict(h[0]))
        return torch.stack(out, dim=1)
