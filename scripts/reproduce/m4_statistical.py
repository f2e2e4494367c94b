"""ETS and ARIMA forecasts with 95% intervals of M4 series, by statsforecast: Nixtla's ports of R forecast's ets and
auto.arima, the functions the M4 organisers ran for these two benchmarks. It runs in an environment of its own
(requirements-m4-statistical.txt): statsforecast 2.1.1 requires pandas < 3, and the framework pins 3.1.1. So this
file imports nothing of the framework; scripts/reproduce/m4_benchmarks.py --stats_python runs it and scores what it
writes.

    <env>/bin/python scripts/reproduce/m4_statistical.py SERIES.npz OUT.npz --model ETS --season 24 --horizon 48

SERIES.npz holds `values` (the series one after another) and `lengths`. OUT.npz gets `mean`, `lo` and `hi` (series x
horizon, the 95% interval), `done` (series forecast so far), `warnings` (warnings the fits raised) and `version`
(statsforecast's). It is rewritten every --save_every series, so a killed run goes on from there when run again.
"""
import argparse
import multiprocessing
import os
import sys
import warnings

import numpy as np

LEVEL = 95


def model(name: str, season: int, length: int):
    """R's defaults: ets() chooses among its models by AICc; auto.arima() searches stepwise and, for a series longer
    than 150 or a period above 12, approximates the likelihood while it searches (then refits the chosen model)."""
    from statsforecast.models import AutoARIMA, AutoETS
    if name == "ETS":
        return AutoETS(season_length=season)
    return AutoARIMA(season_length=season, approximation=length > 150 or season > 12)


def forecast(task: tuple) -> tuple:
    """(mean, lo, hi, number of warnings) of one series."""
    name, season, horizon, x = task
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = model(name, season, len(x)).forecast(y=x, h=horizon, level=[LEVEL])
    return out["mean"], out[f"lo-{LEVEL}"], out[f"hi-{LEVEL}"], len(caught)


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
              "done": np.array(0), "warnings": np.array(0), "version": np.array(statsforecast.__version__)}
    if os.path.isfile(args.out):
        with np.load(args.out) as f:
            if f["mean"].shape == (n, h) and str(f["version"]) == statsforecast.__version__:
                result.update({k: f[k] for k in ("mean", "lo", "hi", "done", "warnings")})
    start = int(result["done"])
    tasks = ((args.model, args.season, h, x) for x in series[start:])
    with multiprocessing.get_context("fork").Pool(args.processes) as pool:
        for i, (mean, lo, hi, caught) in enumerate(pool.imap(forecast, tasks), start):
            result["mean"][i], result["lo"][i], result["hi"][i] = mean, lo, hi
            result["done"], result["warnings"] = np.array(i + 1), result["warnings"] + caught
            if (i + 1) % args.save_every == 0 or i + 1 == n:
                save(args.out, result)
                sys.stdout.write(f"{args.model}: {i + 1}/{n} series\n")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
