import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, hparam
from models.layers.batch_stats import BatchMean
from models.layers.seasonal_trend import DecompositionConfig, DecompositionTransformer, HeadMixing


class AutoCorrelation(nn.Module):
    """Auto-Correlation: the top-k time delays of the query-key autocorrelation, found with FFTs, and the values
    rolled by each delay, summed with softmax weights of their correlations.

    The autocorrelation is averaged over heads and channels. In training mode the delays are the top k of its
    mean over the batch, one set for all windows of a batch (the official time_delay_agg_training, "a
    batch-normalization style design"): a window's output depends on the other windows of its batch. That mean
    is a BatchMean, so under DDP it is the mean over every rank's batch and the delays are those one process
    would pick on the global batch (the official code on several GPUs, nn.DataParallel, picks them per GPU
    from its own chunk). In eval mode each window takes its own top k (time_delay_agg_inference).
    """

    def __init__(self, factor: int):
        super().__init__()
        self.factor = factor
        self.batch_mean = BatchMean()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        B, L, H, E = q.shape
        # keys and values cut or zero-padded to the queries' length
        k, v = k[:, :L], v[:, :L]
        if k.shape[1] < L:
            k, v = (F.pad(t, (0, 0, 0, 0, 0, L - t.shape[1])) for t in (k, v))
        # FFTs in float32 (also under mixed precision). The mean over heads and channels comes after the inverse
        # FFT as in the official code: taken before, rounding alone can swap near-equal delays in the top k.
        spectrum = torch.fft.rfft(q.float(), dim=1) * torch.fft.rfft(k.float(), dim=1).conj()
        corr = torch.fft.irfft(spectrum, n=L, dim=1).mean(dim=(2, 3))  # (B, L): correlation at each delay
        top_k = min(int(self.factor * math.log(L)), L)
        if self.training:
            delays = torch.topk(self.batch_mean(corr.detach()), top_k).indices
            weights, delays = corr[:, delays], delays.expand(B, -1)
        else:
            weights, delays = torch.topk(corr, top_k, dim=-1)
        weights = torch.softmax(weights, dim=-1)
        # sum_i weight_i * value[t + delay_i] (circularly: the official code rolls the values by -delay_i) is the
        # circular cross-correlation of the values with a kernel holding weight_i at delay_i: one FFT product
        # instead of a pass over every value per delay (19 delays at length 768)
        kernel = torch.zeros(B, L, dtype=weights.dtype, device=v.device).scatter_add(1, delays, weights)
        spectrum = torch.fft.rfft(v.float(), dim=1) * torch.fft.rfft(kernel, dim=1).conj()[:, :, None, None]
        return torch.fft.irfft(spectrum, n=L, dim=1).flatten(2)


class Model(nn.Module):
    """Autoformer: a decomposition Transformer whose attention is Auto-Correlation (period-based dependencies).

    Wu, Xu, Wang, Long. "Autoformer: Decomposition Transformers with Auto-Correlation for Long-Term Series
    Forecasting." NeurIPS 2021. https://arxiv.org/abs/2106.13008 (official code: github.com/thuml/Autoformer)

    The encoder keeps the seasonal part of every layer's output; the decoder, fed the last label_len points of
    the window (seasonal part, then zeros) and the window's trend (then its mean), accumulates the trends its
    layers extract (models.layers.seasonal_trend). Every self- and cross-attention is Auto-Correlation with
    factor x ln(length) delays. Calendar features of the window and the horizon are embedded (no positional
    embedding). Defaults are the official run.py's (dropout 0.05) with its scripts' factor 3.

    Deviations from the official code:
    - Training mode under DDP: the delays come from the mean over the global batch (see AutoCorrelation).
    - The weighted sum of the delayed values is computed as the circular cross-correlation it equals (one FFT
      product; equal to the official per-delay rolls up to float rounding, with no host synchronisation per
      delay); FFTs run in float32 under mixed precision.
    - The top-k count is capped at the length (the official code fails for factor x ln L > L). The dropout that
      the official AutoCorrelation defines but never applies, and its optional attention output, are left out.
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=True, time_marks=True,
                                future_marks=True, multi_output=True)

    @dataclass
    class Config(DecompositionConfig):
        factor: int = hparam(3, "attention sampling factor (ProbSparse / Auto-Correlation top-k: factor x log L)",
                             tiny=1, low=1)

    def __init__(self, configs):
        super().__init__()

        def mixing():
            return HeadMixing(AutoCorrelation(configs.factor), configs.d_model, configs.n_heads)

        self.network = DecompositionTransformer(configs, mixing, mixing, mixing)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        return self.network(x, x_mark)
