"""Forecast metrics from sums, so sharded evaluation reduces to exactly the single-process value."""
import torch

METRIC_NAMES = ("mse", "mae", "rmse", "mape", "mspe")


def error_sums(pred: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
    """[sum sq err, sum abs err, sum abs pct err, sum sq pct err, count] in float64."""
    pred, true = pred.double(), true.double()
    err = pred - true
    pct = err / true  # MAPE/MSPE as in TSLib: unbounded where the (scaled) truth is near zero
    return torch.stack([err.square().sum(), err.abs().sum(), pct.abs().sum(), pct.square().sum(),
                        torch.tensor(float(err.numel()), dtype=torch.float64, device=err.device)])


def metrics_from_sums(sums: torch.Tensor) -> dict:
    se, ae, ape, spe, n = sums.tolist()
    return {"mse": se / n, "mae": ae / n, "rmse": (se / n) ** 0.5, "mape": ape / n, "mspe": spe / n}
