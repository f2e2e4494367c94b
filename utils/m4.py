"""The M4 competition's accuracy measures and its simplest benchmarks, as its organisers' code defines them
(github.com/Mcompetitions/M4-methods, "Benchmarks and Evaluation.R"):

  sMAPE    per step 200 |y - f| / (|y| + |f|), averaged over the horizon, then over the series;
  MASE     per step |y - f| / the mean of |x_t - x_(t-m)| over the series' training values (m its subset's
           frequency), averaged alike;
  OWA      (sMAPE / sMAPE of Naive2 + MASE / MASE of Naive2) / 2, each the subset's average: a ratio of averages.

  Naive1   the last value, repeated;
  sNaive   the last m values, repeated;
  Naive2   Naive1 of the seasonally adjusted series, seasonalised again: where the series passes the 90%
           autocorrelation test at lag m (and is at least 3 m long), it is divided by the seasonal indices of a
           classical multiplicative decomposition (R's decompose), and the forecast is multiplied by the last m
           indices, repeated.
"""
import numpy as np

T_CRITICAL = 1.645  # the one-sided 90% point of the seasonality test


def smape(y: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Per step, in percent."""
    return 200 * np.abs(y - f) / (np.abs(y) + np.abs(f))


def mase_scale(insample: np.ndarray, m: int) -> float:
    """The mean absolute error of the seasonal naive forecast over the training values."""
    return float(np.mean(np.abs(insample[m:] - insample[:-m])))


def mase(insample: np.ndarray, y: np.ndarray, f: np.ndarray, m: int) -> np.ndarray:
    """Per step."""
    return np.abs(y - f) / mase_scale(insample, m)


def owa(smape_mean: float, mase_mean: float, naive2_smape: float, naive2_mase: float) -> float:
    return (smape_mean / naive2_smape + mase_mean / naive2_mase) / 2


def autocorrelation(x: np.ndarray, lag: int) -> float:
    centred = x - x.mean()
    return float(np.dot(centred[lag:], centred[:-lag]) / np.dot(centred, centred))


def is_seasonal(x: np.ndarray, m: int) -> bool:
    """|r_m| beyond 1.645 / sqrt(n) * sqrt(1 + 2 sum_(k<m) r_k^2); never for m = 1 or a series shorter than 3 m."""
    if m <= 1 or len(x) < 3 * m:
        return False
    r = np.array([autocorrelation(x, k) for k in range(1, m + 1)])
    limit = T_CRITICAL / np.sqrt(len(x)) * np.sqrt(1 + 2 * np.sum(r[:-1] ** 2))
    return bool(abs(r[-1]) > limit)


def seasonal_indices(x: np.ndarray, m: int) -> np.ndarray:
    """Each point's index of a classical multiplicative decomposition (R's decompose): x over its centred moving
    average (2 x m for an even m), averaged by position in the cycle, the m averages scaled to a mean of 1."""
    weights = np.full(m + 1 - m % 2, 1.0 / m)
    if m % 2 == 0:
        weights[[0, -1]] = 0.5 / m
    half = len(weights) // 2
    trend = np.full(len(x), np.nan)
    trend[half:len(x) - half] = np.convolve(x, weights, mode="valid")
    ratio = x / trend
    figure = np.array([np.nanmean(ratio[i::m]) for i in range(m)])
    return np.resize(figure / figure.mean(), len(x))


def naive1(x: np.ndarray, horizon: int, m: int = 1) -> np.ndarray:
    return np.full(horizon, x[-1])


def seasonal_naive(x: np.ndarray, horizon: int, m: int) -> np.ndarray:
    return np.resize(x[-m:], horizon)


def naive2(x: np.ndarray, horizon: int, m: int) -> np.ndarray:
    if not is_seasonal(x, m):
        return naive1(x, horizon)
    indices = seasonal_indices(x, m)
    return (x / indices)[-1] * np.resize(indices[-m:], horizon)


BENCHMARKS = {"Naive1": naive1, "sNaive": seasonal_naive, "Naive2": naive2}
