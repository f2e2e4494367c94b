"""What the whole-content data fingerprint costs a run: hashing a benchmark-sized file the first time, the cached
lookup after, beside reading the same file as a run does.

    python -m scripts.benchmark.fingerprint [--rows 17544 --columns 862] [--repeat 3]

Writes a CSV of the shape asked (default: Traffic's, 17544 hourly rows x 862 sensors, about 130 MB; ECL is
26304 x 321, Weather 52696 x 21) with a date column first, then times, best of --repeat (the file stays in the
page cache, as a run's data file does after its first read): the first fingerprint (SHA-256 of every byte, cache
empty), the cached one (the file unchanged), and pandas' read of the CSV that every run makes anyway. Numbers
only; nothing is asserted.
"""
import argparse
import contextlib
import os
import shutil
import tempfile
import time

import numpy as np
import pandas as pd

from data_provider.readers import read_dated_csv
from utils import cli
from utils.fingerprints import file_fingerprint


@contextlib.contextmanager
def cache_in(folder: str):
    """An empty fingerprint cache of the benchmark's own for the duration (the user's is left as it was)."""
    before = os.environ.get("TSF_CACHE_DIR")
    os.environ["TSF_CACHE_DIR"] = folder
    try:
        yield
    finally:
        if before is None:
            del os.environ["TSF_CACHE_DIR"]
        else:
            os.environ["TSF_CACHE_DIR"] = before


def best_seconds(action, repeat: int, before=lambda: None) -> float:
    times = []
    for _ in range(repeat):
        before()
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv=None) -> None:
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=cli.at_least(2), default=17544)
    p.add_argument("--columns", type=cli.at_least(1), default=862, help="value columns after the date")
    p.add_argument("--repeat", type=cli.at_least(1), default=3)
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder, cache_in(os.path.join(folder, "cache")):
        path = os.path.join(folder, "data.csv")
        values = np.random.default_rng(0).normal(size=(a.rows, a.columns)).round(4)
        frame = pd.DataFrame(values, columns=[f"c{i}" for i in range(a.columns - 1)] + ["OT"])
        frame.insert(0, "date", pd.date_range("2016-07-01", periods=a.rows, freq="h").strftime("%Y-%m-%d %H:%M:%S"))
        frame.to_csv(path, index=False)
        size = os.path.getsize(path)
        with open(path, "rb") as f:  # in the page cache, as a data file is once any run has read it
            while f.read(1 << 24):
                pass
        cold = best_seconds(lambda: file_fingerprint(path), a.repeat,
                            lambda: shutil.rmtree(os.environ["TSF_CACHE_DIR"], ignore_errors=True))
        file_fingerprint(path)
        cached = best_seconds(lambda: file_fingerprint(path), a.repeat)
        read = best_seconds(lambda: read_dated_csv(path, "OT"), a.repeat)
    print(f"{a.rows} x {a.columns + 1} CSV, {size / 1e6:.0f} MB, best of {a.repeat}")
    print("| step | seconds | MB/s |")
    print("|---|---|---|")
    for what, seconds in (("fingerprint, first time (every byte hashed)", cold),
                          ("fingerprint, cached (file unchanged)", cached), ("reading the CSV (pandas)", read)):
        print(f"| {what} | {seconds:.4f} | {size / 1e6 / seconds:.0f} |")


if __name__ == "__main__":
    cli.run(main)
