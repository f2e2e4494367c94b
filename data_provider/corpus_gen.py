"""Generated series for test corpora: many files of varied lengths, seasonalities, trends, noise levels and,
in some, missing stretches (NaN) that the corpus build cuts around.

    python -m data_provider.corpus generate OUT --points 1e9 --series 2000

Series are written one at a time, so generating a corpus larger than memory needs only one series' memory.
"""
import os

import numpy as np
import pandas as pd

PERIODS = (4, 7, 12, 24, 48, 96, 168, 365)
MIN_LENGTH = 64


def lengths(points: int, series: int, rng: np.random.Generator) -> np.ndarray:
    """series lengths, log-uniform over two decades, summing to points (each at least MIN_LENGTH)."""
    weights = np.exp(rng.uniform(0, np.log(100), series))
    sizes = np.maximum((weights / weights.sum() * points).astype(np.int64), MIN_LENGTH)
    sizes[np.argmax(sizes)] += max(points - int(sizes.sum()), 0)
    return sizes


def series_values(length: int, channels: int, rng: np.random.Generator, missing: float) -> np.ndarray:
    """(length, channels) float32: level + trend + one to three seasonal terms + white and random-walk noise;
    with probability `missing`, one to three NaN stretches of up to 5% of the length each."""
    t = np.arange(length, dtype=np.float32)
    out = np.empty((length, channels), dtype=np.float32)
    for c in range(channels):
        x = np.full(length, rng.normal(0, 5), dtype=np.float32)
        x += np.float32(rng.normal(0, 3) / length) * t
        for period in rng.choice(PERIODS, rng.integers(1, 4), replace=False):
            x += np.float32(rng.uniform(0.2, 2)) * np.sin(t * np.float32(2 * np.pi / period) + np.float32(
                rng.uniform(0, 2 * np.pi)))
        x += rng.standard_normal(length, dtype=np.float32) * np.float32(rng.uniform(0.05, 1.0))
        walk = np.cumsum(rng.standard_normal(length, dtype=np.float32))
        x += walk * np.float32(rng.uniform(0, 2) / np.sqrt(length))
        if rng.random() < missing:
            for _ in range(rng.integers(1, 4)):
                gap = int(rng.integers(1, max(2, length // 20)))
                begin = int(rng.integers(0, max(1, length - gap)))
                x[begin:begin + gap] = np.nan
        out[:, c] = x
    return out


def generate(out: str, points: int, series: int, seed: int = 0, fmt: str = "npy", missing: float = 0.1,
             max_channels: int = 1, per_folder: int = 1000) -> list:
    """Write `series` files (folders of per_folder) under out; returns their paths."""
    rng = np.random.default_rng(seed)
    paths = []
    for i, length in enumerate(lengths(points, series, rng)):
        values = series_values(int(length), int(rng.integers(1, max_channels + 1)), rng, missing)
        folder = os.path.join(out, f"part{i // per_folder:04d}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"series{i:06d}.{fmt}")
        if fmt == "npy":
            np.save(path, values)
        else:
            frame = pd.DataFrame(values, columns=[f"ch{c}" for c in range(values.shape[1])])
            frame.insert(0, "date", pd.date_range("2000-01-01", periods=len(frame), freq="h"))
            frame.to_csv(path, index=False) if fmt == "csv" else frame.to_parquet(path, index=False)
        paths.append(path)
    return paths


def add_arguments(parser) -> None:
    parser.add_argument("out")
    parser.add_argument("--points", type=float, default=1e6, help="total time points (1e9: about 4 GB)")
    parser.add_argument("--series", type=int, default=100, help="number of files")
    parser.add_argument("--channels", type=int, default=1, help="at most this many channels per file")
    parser.add_argument("--missing", type=float, default=0.1, help="fraction of series with NaN stretches")
    parser.add_argument("--format", choices=("npy", "csv", "parquet"), default="npy")
    parser.add_argument("--seed", type=int, default=0)


def run(args) -> None:
    generate(args.out, int(args.points), args.series, args.seed, args.format, args.missing, args.channels)
