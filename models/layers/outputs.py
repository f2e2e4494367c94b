"""k values per forecast point (models/base.py: n_outputs, Capabilities.multi_output): a model widens its final
projection from P to P * k outputs and splits them here. The layout is point-major (the k values of a point are
adjacent), so with k = 1 the projection, its initialisation and its output are the point model's own."""
import torch


def split_points(y: torch.Tensor, k: int) -> torch.Tensor:
    """(..., P * k) -> (..., P, k); unchanged with k = 1."""
    return y if k == 1 else y.unflatten(-1, (-1, k))


def channels_last(y: torch.Tensor) -> torch.Tensor:
    """(B, C, P) -> (B, P, C), or (B, C, P, k) -> (B, P, C, k): a channel-first forecast in the contract's order."""
    return y.transpose(1, 2)


def per_series(forecast, x: torch.Tensor, n_outputs: int) -> torch.Tensor:
    """A univariate network applied to every channel of x (batch, time, channels) as a series of its own:
    forecast maps (series, time) to (series, horizon, k); the result is (batch, horizon, channels), with a last
    dimension of k values per point where n_outputs is k > 1."""
    B, _, C = x.shape
    out = forecast(x.transpose(1, 2).reshape(B * C, -1)).unflatten(0, (B, C)).transpose(1, 2)
    return out.squeeze(-1) if n_outputs == 1 else out


def sample_quantiles(samples: torch.Tensor, quantiles: torch.Tensor) -> torch.Tensor:
    """Empirical quantiles (series, time, k) of samples (series, samples, time) at levels (k,): linear between the
    order statistics, as torch.quantile (which refuses inputs of more than 2^24 values)."""
    ordered = samples.sort(dim=1).values
    position = quantiles * (samples.shape[1] - 1)
    below = position.floor().long()
    above = position.ceil().long()
    weight = (position - below).to(samples.dtype)[:, None]
    return torch.lerp(ordered[:, below], ordered[:, above], weight).transpose(1, 2)
