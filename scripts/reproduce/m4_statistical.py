"""ETS and ARIMA forecasts with 95% intervals of M4 series, by statsforecast: Nixtla's ports of R forecast's ets and
auto.arima, the functions the M4 organisers ran for these two benchmarks. It runs in an environment of its own
(requirements-m4-statistical.txt): statsforecast 2.1.1 requires pandas < 3, and the framework pins 3.1.1. So this
file imports nothing of the framework; scripts/reproduce/m4_benchmarks.py --stats_python runs it and scores what it
writes.

    <env>/bin/python scripts/reproduce/m4_statistical.py SERIES.npz OUT.npz --model ETS --season 24 --horizon 48

SERIES.npz holds `values` (the series one after another) and `lengths`. OUT.npz gets `mean`, `lo` and `hi` (series x
horizon, the 95% interval), `done` (series forecast so far), `warnings` (warnings the fits raised), `corrected`
(ETS intervals computed here, below) and `version` (statsforecast's, with this file's REVISION). It is rewritten every
--save_every series, so a killed run goes on from there when run again.

statsforecast 2.1.1's interval for ETS models with multiplicative error and season (class 3 of Hyndman, Koehler, Ord
& Snyder, "Forecasting with Exponential Smoothing", 2008, ch. 6: MNM, MAM, MAdM) differs from R's forecast and the
book, which both follow: its recursion never moves the state's outer product M_h on, so every step's variance uses
the last season's index, and such Hourly intervals covered about 55% of the test values instead of 95%. This file
computes that variance as R does; on real Hourly fits it agrees with 2000 paths simulated from the same fit
(statsforecast's simulate_ets) to within 1% of the interval's width.
"""
import argparse
import multiprocessing
import os
import sys
import warnings

import numpy as np

LEVEL = 95
Z = 1.959963984540054  # the 95% interval's normal quantile
# what this file adds to statsforecast's forecasts, per model: a file of another revision is not read back
REVISION = {"ETS": "+book-intervals", "ARIMA": ""}


def model(name: str, season: int, length: int):
    """R's defaults: ets() chooses among its models by AICc; auto.arima() searches stepwise and, for a series longer
    than 150 or a period above 12, approximates the likelihood while it searches (then refits the chosen model)."""
    from statsforecast.models import AutoARIMA, AutoETS
    if name == "ETS":
        return AutoETS(season_length=season)
    return AutoARIMA(season_length=season, approximation=length > 150 or season > 12)


def class3_variance(fit: dict, h: int) -> np.ndarray:
    """The forecast variance of an ETS model with multiplicative error and season, steps 1..h (the book's class 3, as
    R's forecast:::class3): M_h, the outer product of the non-seasonal and the seasonal states, moves on each step."""
    s2, m, state = fit["sigma2"], fit["m"], fit["states"][-1]
    trend, damped = fit["components"][1], fit["components"][3] == "D"
    alpha, beta, gamma, phi = fit["par"][:4]
    if trend == "N":
        H1, F1, G1 = np.ones((1, 1)), np.ones((1, 1)), np.full((1, 1), alpha)
    else:
        H1, F1 = np.ones((1, 2)), np.array([[1.0, 1.0], [0.0, phi if damped else 1.0]])
        G1 = np.array([[alpha, alpha], [beta, beta]])
    H2 = np.zeros((1, m))
    H2[0, -1] = 1
    F2 = np.zeros((m, m))  # the seasonal states rotate
    F2[0, -1], F2[1:, :-1] = 1, np.eye(m - 1)
    G2 = np.zeros((m, m))
    G2[0, -1] = gamma
    M = np.outer(state[:len(state) - m], state[len(state) - m:])
    V = np.zeros((M.size, M.size))
    H21, F21, G21 = np.kron(H2, H1), np.kron(F2, F1), np.kron(G2, G1)
    K = np.kron(G2, F1) + np.kron(F2, G1)
    variance = np.zeros(h)
    for i in range(h):
        mu = (H1 @ M @ H2.T).item()
        variance[i] = (1 + s2) * (H21 @ V @ H21.T).item() + s2 * mu ** 2
        v = M.flatten(order="F")[:, None]  # vec(M), column by column
        V = F21 @ V @ F21.T + s2 * (F21 @ V @ G21.T + G21 @ V @ F21.T + K @ (V + v @ v.T) @ K.T
                                    + s2 * G21 @ (3 * V + 2 * v @ v.T) @ G21.T)
        M = F1 @ M @ F2.T + G1 @ M @ G2.T * s2
    return variance


def corrected_variance(fit: dict, mean: np.ndarray) -> np.ndarray | None:
    """The variance where statsforecast's differs from the book's (module docstring); None elsewhere."""
    error, _, season = fit["components"][:3]
    return class3_variance(fit, len(mean)) if error == "M" and season == "M" else None


def forecast(task: tuple) -> tuple:
    """(mean, lo, hi, number of warnings, whether the interval was computed here) of one series."""
    name, season, horizon, x = task
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fitted = model(name, season, len(x)).fit(x)
        out = fitted.predict(h=horizon, level=[LEVEL])
    mean, lo, hi = out["mean"], out[f"lo-{LEVEL}"], out[f"hi-{LEVEL}"]
    variance = corrected_variance(fitted.model_, mean) if name == "ETS" else None
    if variance is not None:
        lo, hi = mean - Z * np.sqrt(variance), mean + Z * np.sqrt(variance)
    return mean, lo, hi, len(caught), variance is not None


def save(path: str, result: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}.npz"
    np.savez(tmp, **result)
    os.replace(tmp, path)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("series")
    p.add_argument("out")
    p.add_argument("--model", choices=("ETS", "ARIMA"), required=True)
    p.add_argument("--season", type=int, required=True)
    p.add_argument("--horizon", type=int, required=True)
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--save_every", type=int, default=20)
    args = p.parse_args(argv)
    import statsforecast
    with np.load(args.series) as f:
        series = np.split(f["values"], np.cumsum(f["lengths"])[:-1])
    n, h = len(series), args.horizon
    result = {"mean": np.full((n, h), np.nan), "lo": np.full((n, h), np.nan), "hi": np.full((n, h), np.nan),
              "done": np.array(0), "warnings": np.array(0), "corrected": np.array(0),
              "version": np.array(statsforecast.__version__ + REVISION[args.model])}
    if os.path.isfile(args.out):
        with np.load(args.out) as f:
            if f["mean"].shape == (n, h) and str(f["version"]) == str(result["version"]):
                result.update({k: f[k] for k in ("mean", "lo", "hi", "done", "warnings", "corrected")})
    start = int(result["done"])
    tasks = ((args.model, args.season, h, x) for x in series[start:])
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        for i, (mean, lo, hi, caught, corrected) in enumerate(pool.imap(forecast, tasks), start):
            result["mean"][i], result["lo"][i], result["hi"][i] = mean, lo, hi
            result["done"], result["warnings"] = np.array(i + 1), result["warnings"] + caught
            result["corrected"] = result["corrected"] + corrected
            if (i + 1) % args.save_every == 0 or i + 1 == n:
                save(args.out, result)
                sys.stdout.write(f"{args.model}: {i + 1}/{n} series\n")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
