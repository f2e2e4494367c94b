"""The M4 competition's accuracy measures and its statistical benchmarks, as its organisers' code defines them
(github.com/Mcompetitions/M4-methods, "Benchmarks and Evaluation.R"):

  sMAPE    per step 200 |y - f| / (|y| + |f|), averaged over the horizon, then over the series;
  MASE     per step |y - f| / the mean of |x_t - x_(t-m)| over the series' training values (m its subset's
           frequency), averaged alike;
  OWA      (sMAPE / sMAPE of Naive2 + MASE / MASE of Naive2) / 2, each the subset's average: a ratio of averages.
  MSIS     of a 95% interval [L, U], per step (U - L + 40 (L - y) [y < L] + 40 (y - U) [y > U]) over MASE's scale,
           averaged alike;
  ACD      |the share of the subset's test values inside their intervals - 0.95|.

  Naive1   the last value, repeated;
  sNaive   the last m values, repeated;
  Naive2   Naive1 of the seasonally adjusted series, seasonalised again: where the series passes the 90%
           autocorrelation test at lag m (and is at least 3 m long), it is divided by the seasonal indices of a
           classical multiplicative decomposition (R's decompose), and the forecast is multiplied by the last m
           indices, repeated;
  SES, Holt, Damped, Theta   fitted to the seasonally adjusted series and seasonalised again, as Naive2 is;
  Comb     the mean of SES, Holt and Damped.

The intervals' benchmarks: Naive1's (R's naive(): the last value +- 1.96 sigma sqrt(step), sigma the root mean square
of the one-step changes; `naive1_interval`), ETS's and ARIMA's (scripts/reproduce/m4_statistical.py).
"""
import numpy as np

T_CRITICAL = 1.645  # the one-sided 90% point of the seasonality test
INTERVAL_ALPHA = 0.05  # the competition scored 95% intervals
Z_INTERVAL = 1.959963984540054  # their normal quantile, R's qnorm(0.975)


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


def msis(insample: np.ndarray, y: np.ndarray, lo: np.ndarray, hi: np.ndarray, m: int,
         alpha: float = INTERVAL_ALPHA) -> np.ndarray:
    """Per step: the interval's width plus 2 / alpha times how far y lies outside it, over MASE's scale."""
    penalty = 2 / alpha * (np.maximum(lo - y, 0) + np.maximum(y - hi, 0))
    return (hi - lo + penalty) / mase_scale(insample, m)


def acd(y: np.ndarray, lo: np.ndarray, hi: np.ndarray, alpha: float = INTERVAL_ALPHA) -> float:
    """|the share of values inside their intervals - the intervals' level|, over every series and step given."""
    return abs(float(np.mean((y >= lo) & (y <= hi))) - (1 - alpha))


def weighted_average(subsets: list) -> tuple:
    """The competition's average over subsets, [(series, sMAPE, MASE, Naive2's sMAPE, Naive2's MASE)] of each:
    (sMAPE, MASE, OWA), each average weighted by the subsets' numbers of series, OWA from the weighted averages."""
    n = sum(s[0] for s in subsets)
    means = [sum(s[0] * s[i] for s in subsets) / n for i in range(1, 5)]
    return means[0], means[1], owa(*means)


def autocorrelation(x: np.ndarray, lag: int) -> float:
    centred = x - x.mean()
    return float(np.dot(centred[lag:], centred[:-lag]) / np.dot(centred, centred))


def is_seasonal(x: np.ndarray, m: int) -> bool:
    """|r_m| beyond 1.645 / sqrt(n) * sqrt(1 + 2 sum_(k<m) r_k^2); never for m = 1, a series shorter than 3 m or a
    constant one."""
    if m <= 1 or len(x) < 3 * m or np.ptp(x) == 0:  # a constant series has no autocorrelation
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
    """m: unused (every benchmark takes it)."""
    return np.full(horizon, x[-1])


def naive1_interval(x: np.ndarray, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) of R's naive() 95% interval: the last value +- 1.96 sigma sqrt(step), sigma the root mean square of
    the series' one-step changes."""
    half = Z_INTERVAL * np.sqrt(np.mean(np.diff(x) ** 2) * np.arange(1, horizon + 1))
    return x[-1] - half, x[-1] + half


def seasonal_naive(x: np.ndarray, horizon: int, m: int) -> np.ndarray:
    return np.resize(x[-m:], horizon)


def seasonally_adjusted(forecast):
    """The benchmark that forecasts the seasonally adjusted series with forecast(x, horizon) and multiplies the
    forecast by the last m seasonal indices, repeated (a series that fails the seasonality test: unadjusted)."""
    def adjusted(x: np.ndarray, horizon: int, m: int) -> np.ndarray:
        if not is_seasonal(x, m):
            return forecast(x, horizon)
        indices = seasonal_indices(x, m)
        return forecast(x / indices, horizon) * np.resize(indices[-m:], horizon)
    return adjusted


# Fitted by statsmodels (the organisers used R's forecast package: ses, holt, holt(damped = TRUE), their own
# classic Theta, which is SES with drift, as forecast::thetaf): the same models, each library's own optimiser
def _ses(x, horizon):
    from statsmodels.tsa.holtwinters import SimpleExpSmoothing
    return SimpleExpSmoothing(x, initialization_method="estimated").fit().forecast(horizon)


def _holt(damped: bool):
    def fit(x, horizon):
        from statsmodels.tsa.holtwinters import Holt
        return Holt(x, damped_trend=damped, initialization_method="estimated").fit().forecast(horizon)
    return fit


def _theta(x, horizon):
    if np.ptp(x) == 0:  # its value: statsmodels' state-space fit of SES would divide by the series' zero variance
        return np.full(horizon, x[-1])
    from statsmodels.tsa.forecasting.theta import ThetaModel
    return np.asarray(ThetaModel(x, period=1, deseasonalize=False).fit().forecast(horizon))


def _comb(x, horizon):
    return (_ses(x, horizon) + _holt(False)(x, horizon) + _holt(True)(x, horizon)) / 3


naive2 = seasonally_adjusted(naive1)
BENCHMARKS = {"Naive1": naive1, "sNaive": seasonal_naive, "Naive2": naive2, "SES": seasonally_adjusted(_ses),
              "Holt": seasonally_adjusted(_holt(False)), "Damped": seasonally_adjusted(_holt(True)),
              "Theta": seasonally_adjusted(_theta), "Comb": seasonally_adjusted(_comb)}
