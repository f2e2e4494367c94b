"""Named datasets, each one entry: its file, how the file is read, how its rows split into train/val/test, its
sampling frequency and target. Every module in this package lists its entries in `DATASETS`; add
data_provider/datasets/my_data.py and `--data my_data` reads it from --root_path, with nothing else to edit.

Generic names (custom, PEMS) read any file of their format; given a benchmark's standard file
(`--data custom --data_path weather.csv`, as TSLib scripts say it) they resolve to the benchmark (Weather).
"""
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from utils.registry import collect

FILL_METHODS = ("ffill", "interpolate")  # how NaNs are filled inside each split (data_provider/factory.py)


@dataclass(frozen=True)
class Dataset:
    name: str                            # the --data value
    file: str | None                     # standard file name under --root_path (None: --data_path is needed)
    read: Callable                       # (path, target) -> readers.Table
    split: Callable[[int], dict]         # rows -> {split: (first row, end row)} of the rows each split forecasts
    lookback: bool = True                # val/test windows may read seq_len rows before their first row
    freq: str | None = None              # sampling step of the timestamps (checked against the file), e.g. 10min
    target: str | None = "OT"            # default --target (None: the last column)
    fill_missing: str | None = None      # NaNs filled inside each split after scaling: a FILL_METHODS name
    family: str | None = None            # the generic name whose --data_path resolves to this benchmark
    generate: Callable[[], str] | None = None  # the file's text, written when absent (the synthetic default)

    def __post_init__(self):
        if self.fill_missing not in (None, *FILL_METHODS):
            raise ValueError(f"dataset {self.name}: fill_missing {self.fill_missing!r} is not one of {FILL_METHODS}")
        if self.freq is not None:
            try:
                pd.Timedelta(self.freq)
            except ValueError:
                raise ValueError(f"dataset {self.name}: freq {self.freq!r} is not a fixed step (e.g. 1h, 10min, "
                                 "7D)") from None


class DatasetFileError(ValueError):
    """A file in data_provider/datasets/ that cannot serve: the message names it and what is wrong."""


def ratio_split(train: float, test: float, val: float | None = None) -> Callable[[int], dict]:
    """TSLib's Dataset_Custom split: int(train*n) rows to train, the last int(test*n) to test, val between
    (or, given val, int(val*n) rows after train: Dataset_Solar, whose val may end up to two rows before test)."""
    def split(n: int) -> dict:
        n_train, n_test = int(n * train), int(n * test)
        val_end = n - n_test if val is None else n_train + int(n * val)
        return {"train": (0, n_train), "val": (n_train, val_end), "test": (n - n_test, n)}
    return split


def block_split(train: float, val: float) -> Callable[[int], dict]:
    """Contiguous blocks cut at int(train*n) and int((train+val)*n) (TSLib's Dataset_PEMS)."""
    def split(n: int) -> dict:
        a, b = int(n * train), int(n * (train + val))
        return {"train": (0, a), "val": (a, b), "test": (b, n)}
    return split


def fixed_split(train_end: int, val_end: int, test_end: int) -> Callable[[int], dict]:
    """Fixed borders (ETT's 12/4/4 months); rows after test_end are not used."""
    def split(n: int) -> dict:
        if n < test_end:
            raise ValueError(f"needs at least {test_end} rows for its standard split, found {n}")
        return {"train": (0, train_end), "val": (train_end, val_end), "test": (val_end, test_end)}
    return split


@functools.cache
def registry() -> dict:
    """name -> Dataset, from every module of the package (imported on first use)."""
    found = collect(__name__, __path__, "DATASETS", Dataset, DatasetFileError)
    by_lower = {}
    for name in found:  # --data is case-insensitive
        if name.lower() in by_lower:
            raise DatasetFileError(f"datasets {by_lower[name.lower()]!r} and {name!r} differ only in case")
        by_lower[name.lower()] = name
    return found


def resolve(data: str, data_path: str | None) -> Dataset:
    """The entry for --data (case-insensitive); a generic name given a benchmark's standard file resolves
    to that benchmark. KeyError for an unknown name."""
    by_lower = {name.lower(): entry for name, entry in registry().items()}
    entry = by_lower[data.lower()]
    if data_path is not None:
        base = os.path.basename(data_path)
        for candidate in registry().values():
            if candidate.family == entry.name and candidate.file == base:
                return candidate
    return entry
