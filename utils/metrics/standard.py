"""The metrics of the long-term forecasting papers, as Time-Series-Library computes them (on scaled data)."""
from utils.metrics import Metric


def _error(pred, true):
    return pred - true


def _relative_error(pred, true):
    return (pred - true) / true  # unbounded where the scaled truth is near zero, as in TSLib


METRICS = [
    Metric("mse", lambda p, t: _error(p, t).square(), std_power=2, help="mean squared error"),
    Metric("mae", lambda p, t: _error(p, t).abs(), std_power=1, help="mean absolute error"),
    Metric("rmse", lambda p, t: _error(p, t).square(), lambda mean: mean ** 0.5, std_power=2,
           help="root mean squared error"),
    Metric("mape", lambda p, t: _relative_error(p, t).abs(), help="mean absolute percentage error (a fraction)"),
    Metric("mspe", lambda p, t: _relative_error(p, t).square(), help="mean squared percentage error"),
]
