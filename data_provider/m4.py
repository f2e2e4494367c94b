"""The M4 competition's files (Makridakis, Spiliotis, Assimakopoulos, IJF 2020): one CSV per subset and split,
<Subset>-train.csv and <Subset>-test.csv, a row per series: its id, then its values, the shorter series' rows
padded with empty cells. The test file holds each series' next `horizon` values.

SUBSETS: each subset's forecast horizon and frequency (M4-info.csv's "Frequency", the m of its MASE and of its
benchmarks' seasonal adjustment).
"""
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from utils.errors import ConfigError


@dataclass(frozen=True)
class Subset:
    horizon: int
    frequency: int


SUBSETS = {"Yearly": Subset(6, 1), "Quarterly": Subset(8, 4), "Monthly": Subset(18, 12), "Weekly": Subset(13, 1),
           "Daily": Subset(14, 1), "Hourly": Subset(48, 24)}


def read_series(path: str) -> tuple[list, list]:
    """(ids, series): each row's id and its values up to its first empty cell, as float64 arrays."""
    table = pd.read_csv(path, index_col=0, dtype=str)
    ids, series = [], []
    for name, row in zip(table.index, table.to_numpy()):
        values = pd.to_numeric(pd.Series(row), errors="raise").to_numpy(dtype=np.float64)
        length = int(np.argmax(np.isnan(values))) if np.isnan(values).any() else len(values)
        if np.isnan(values[length:]).sum() != len(values) - length:
            raise ConfigError(f"{path}: series {name} has an empty cell before its last value")
        ids.append(str(name))
        series.append(values[:length])
    return ids, series


def load(root: str, subset: str) -> tuple[list, np.ndarray]:
    """(training series, test values (series, horizon)) of a subset under root (the folder of the M4 files)."""
    if subset not in SUBSETS:
        raise ConfigError(f"M4 subset {subset!r}: one of {', '.join(SUBSETS)}")
    paths = [os.path.join(root, f"{subset}-{split}.csv") for split in ("train", "test")]
    for path in paths:
        if not os.path.isfile(path):
            raise ConfigError(f"{path}: no such file (the M4 competition's {os.path.basename(path)})")
    (train_ids, train), (test_ids, test) = (read_series(p) for p in paths)
    horizon = SUBSETS[subset].horizon
    if train_ids != test_ids or any(len(t) != horizon for t in test):
        raise ConfigError(f"{paths[1]}: expected the series of {paths[0]}, in its order, {horizon} values each")
    return train, np.stack(test)
