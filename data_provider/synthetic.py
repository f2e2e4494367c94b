"""Synthetic hourly series so a new user can train without downloading anything.

The target (last column, `OT`) is trend + daily and weekly seasonality + noise + a lagged
linear response to the covariates, so covariate-aware models have something real to learn.

    python -m data_provider.synthetic --out dataset/synthetic/synthetic.csv --length 8000
"""
import argparse

import numpy as np
import pandas as pd

from utils import cli
from utils.files import write_atomic


def generate(length: int = 8000, n_covariates: int = 3, seed: int = 0, start: str = "2020-01-01") -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = np.arange(length, dtype=np.float64)
    columns = {}
    covariates = []
    for i in range(n_covariates):
        period = (24, 24 * 7, 12, 24 * 3.5)[i % 4]
        phase = rng.uniform(0, 2 * np.pi)
        ar_noise = np.zeros(length)
        shocks = rng.normal(0, 0.3, length)
        for k in range(1, length):  # AR(1) noise makes covariates partly unpredictable from their own seasonality
            ar_noise[k] = 0.8 * ar_noise[k - 1] + shocks[k]
        cov = np.sin(2 * np.pi * t / period + phase) + ar_noise
        covariates.append(cov)
        columns[f"cov{i}"] = cov
    trend = 0.0004 * t + 0.5 * np.sin(2 * np.pi * t / (24 * 365))
    seasonal = 1.5 * np.sin(2 * np.pi * t / 24) + 0.8 * np.sin(2 * np.pi * t / (24 * 7)) \
        + 0.3 * np.sin(4 * np.pi * t / 24 + 1.0)
    weights = rng.uniform(0.5, 1.2, n_covariates) * rng.choice([-1, 1], n_covariates)
    driven = sum(w * np.roll(c, lag) for w, c, lag in zip(weights, covariates, range(1, n_covariates + 1)))
    columns["OT"] = 10 + trend + seasonal + driven + rng.normal(0, 0.2, length)
    frame = pd.DataFrame(columns)
    frame.insert(0, "date", pd.date_range(start, periods=length, freq="h").strftime("%Y-%m-%d %H:%M:%S"))
    return frame


def csv_text(frame: pd.DataFrame) -> str:
    """The CSV file's exact content (its fingerprint is part of a run's identity, also before it is written)."""
    return frame.to_csv(index=False, lineterminator="\n")


def write_csv(frame: pd.DataFrame, path: str) -> None:
    """Atomic write: a reader never sees a half-written file."""
    write_atomic(path, lambda f: f.write(csv_text(frame).encode()))


def main(argv=None) -> None:
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="dataset/synthetic/synthetic.csv")
    parser.add_argument("--length", type=cli.at_least(1), default=8000)
    parser.add_argument("--covariates", type=cli.at_least(0), default=3)
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args(argv)
    write_csv(generate(a.length, a.covariates, a.seed), a.out)


if __name__ == "__main__":
    cli.run(main)
