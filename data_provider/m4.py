"""The M4 competition's files (Makridakis, Spiliotis, Assimakopoulos, IJF 2020): one CSV per subset and split,
<Subset>-train.csv and <Subset>-test.csv, a row per series: its id, then its values, the shorter series' rows
padded with empty cells. The test file holds each series' next `horizon` values.

SUBSETS: each subset's forecast horizon, frequency (M4-info.csv's "Frequency", the m of its MASE and of its
benchmarks' seasonal adjustment) and N-BEATS's history multiple L_H (its training windows end within the last
L_H x horizon points of a series).

`short_term_data` is the short-term task's data (docs/short_term.md): one model over every series of a subset, on
the original scale. Each series' last horizon of training values is held out: the validation window (early
stopping, the best checkpoint). Training windows end at the origins within the last L_H x horizon points of what is
left, their targets inside it. The test windows forecast the test file from the whole training series; nothing
else reads the test values.
"""
import logging
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from data_provider.readers import where_to_set
from data_provider.scaling import StandardScale
from data_provider.windows import SeriesWindows
from utils import m4
from utils.errors import ConfigError
from utils.fingerprints import content_fingerprint, file_fingerprint
from utils.log import GROUP

group_log = logging.getLogger(GROUP)
NAME = "m4"


@dataclass(frozen=True)
class Subset:
    horizon: int
    frequency: int
    history: float  # N-BEATS's L_H (TSLib's M4Meta.history_size)


SUBSETS = {"Yearly": Subset(6, 1, 1.5), "Quarterly": Subset(8, 4, 1.5), "Monthly": Subset(18, 12, 1.5),
           "Weekly": Subset(13, 1, 10), "Daily": Subset(14, 1, 10), "Hourly": Subset(48, 24, 10)}
LOOKBACK_MULTIPLE = 2  # TSLib's short-term lookback: twice the horizon


def read_series(path: str) -> tuple[list, list]:
    """(ids, series): each row's id and its values up to its first empty cell, as float64 arrays."""
    table = pd.read_csv(path, index_col=0, dtype=str)
    if len(table) and pd.to_numeric(pd.Series(table.index), errors="coerce").notna().all():
        raise ConfigError(f"{path}: its first column holds numbers, not the series' ids (M4's files begin each row "
                          "with one: H1, W1, ...)")
    ids, series = [], []
    for name, row in zip(table.index, table.to_numpy()):
        values = pd.to_numeric(pd.Series(row), errors="raise").to_numpy(dtype=np.float64)
        length = int(np.argmax(np.isnan(values))) if np.isnan(values).any() else len(values)
        if np.isnan(values[length:]).sum() != len(values) - length:
            raise ConfigError(f"{path}: series {name} has an empty cell before its last value")
        ids.append(str(name))
        series.append(values[:length])
    return ids, series


def paths(root: str, subset: str) -> list:
    """The subset's training and test files under root (the folder of the M4 files)."""
    if subset not in SUBSETS:
        raise ConfigError(f"M4 subset {subset!r}: one of {', '.join(SUBSETS)}")
    return [os.path.join(root, f"{subset}-{split}.csv") for split in ("train", "test")]


def fingerprint(root: str, subset: str) -> str:
    """The content of both of a subset's files, as a run's identity (and a cache of its forecasts) keys it."""
    return content_fingerprint(" ".join(file_fingerprint(p) for p in paths(root, subset)).encode())


def file_name(subset: str) -> str:
    """A subset's data as a run's identity names it: both of its files."""
    return f"{subset}-train.csv+{subset}-test.csv"


def load(root: str, subset: str) -> tuple[list, np.ndarray]:
    """(training series, test values (series, horizon)) of a subset under root (the folder of the M4 files)."""
    return load_named(root, subset)[1:]


def load_named(root: str, subset: str) -> tuple[list, list, np.ndarray]:
    """(ids, training series, test values (series, horizon))."""
    files = paths(root, subset)
    for path in files:
        if not os.path.isfile(path):
            hint = where_to_set(path)
            raise ConfigError(f"{path}: no such file (the M4 competition's {os.path.basename(path)}"
                              + (f"; {hint}" if hint else "") + ")")
    (train_ids, train), (test_ids, test) = (read_series(p) for p in files)
    horizon = SUBSETS[subset].horizon
    if train_ids != test_ids or any(len(t) != horizon for t in test):
        raise ConfigError(f"{files[1]}: expected the series of {files[0]}, in its order, {horizon} values each")
    return train_ids, train, np.stack(test)


def _windows(series: list, seq_len: int, horizon: int, first: list, count: list, slots: int, names: list,
             device: torch.device, marks: bool, **kwargs) -> SeriesWindows:
    """SeriesWindows over `series` (each after seq_len zeros), as float32 on the device."""
    padded = [np.concatenate([np.zeros(seq_len), x]) for x in series]
    starts = np.cumsum([0] + [len(x) for x in padded[:-1]])
    flat = torch.from_numpy(np.concatenate(padded).astype(np.float32)).to(device)
    starts, first, count = (torch.as_tensor(np.asarray(v), dtype=torch.long) for v in (starts, first, count))
    return SeriesWindows(flat, starts, first, count, slots, seq_len, horizon, names, marks=marks, **kwargs)


def short_term_data(args, device: torch.device, uses_marks: bool = False):
    """The short-term task's DataBundle (module docstring): a subset's series unscaled (an identity scale per
    series), its file the pair of the subset's files and its fingerprint that of both contents; uses_marks: the
    model reads calendar features, which series without dates have as one channel of zeros."""
    from data_provider.factory import DataBundle  # noqa: PLC0415 - the factory dispatches to this module
    subset = SUBSETS[args.seasonal_patterns]
    horizon, seq_len = subset.horizon, args.seq_len
    ids, train, test = load_named(args.root_path, args.seasonal_patterns)
    if any(len(x) <= horizon for x in train):
        short = sum(len(x) <= horizon for x in train)
        raise ConfigError(f"{paths(args.root_path, args.seasonal_patterns)[0]}: {short} series have no more than "
                          f"the horizon's {horizon} values: nothing is left to train on once it is held out")
    fitted = [x[:-horizon] for x in train]  # the last horizon of each series: its validation target
    limit = int(args.history_multiple * horizon)  # origins within the last L_H x horizon points of a series
    last = [len(x) - horizon for x in fitted]  # the last origin whose target lies inside the series
    first = [max(1, end - limit + 1) for end in last]
    count = [max(end - begin + 1, 0) for begin, end in zip(first, last)]
    kept = [i for i, n in enumerate(count) if n > 0]
    padded = sum(len(x) < seq_len + horizon for x in train)
    if padded:
        group_log.info("M4 %s: %d of %d series are shorter than seq_len + horizon = %d values: a window's input "
                       "that reaches before its series begins is padded with zeros (N-BEATS)",
                       args.seasonal_patterns, padded, len(train), seq_len + horizon)
    if len(kept) < len(train):
        group_log.info("M4 %s: %d series are shorter than 2 x horizon + 1 = %d values, so no training window fits "
                       "in them once the validation horizon is held out: they are validated and tested, not "
                       "trained on", args.seasonal_patterns, len(train) - len(kept), 2 * horizon + 1)

    def pick(values: list) -> list:
        return [values[i] for i in kept]

    m = subset.frequency
    windows = {
        "train": _windows(pick(fitted), seq_len, horizon, pick(first), pick(count), limit, pick(ids), device,
                          uses_marks, epoch_windows=len(kept)),
        "val": _windows(train, seq_len, horizon, [len(x) for x in fitted], [1] * len(train), 1, ids, device,
                        uses_marks, scale=_scales(fitted, m, device)),
        "test": _windows([np.concatenate([x, y]) for x, y in zip(train, test)], seq_len, horizon,
                         [len(x) for x in train], [1] * len(train), 1, ids, device, uses_marks,
                         scale=_scales(train, m, device),
                         reference=torch.from_numpy(np.stack([m4.naive2(x, horizon, m) for x in train])).to(device)),
    }
    identity = StandardScale(np.zeros(len(train)), np.ones(len(train)))  # M4's series are scored as they are
    return DataBundle(f"M4-{args.seasonal_patterns}", windows, 1, int(uses_marks), ids, identity,
                      file_name(args.seasonal_patterns), fingerprint(args.root_path, args.seasonal_patterns), m,
                      "naive2", standardised=False)


def _scales(series: list, m: int, device: torch.device) -> torch.Tensor:
    """MASE's in-sample scale of each series (utils/m4.py: mase_scale), float64; NaN where it has none (a
    constant series, or one no longer than m)."""
    scales = torch.tensor([m4.mase_scale(x, m) if len(x) > m else np.nan for x in series], dtype=torch.float64)
    return scales.masked_fill(scales == 0, float("nan")).to(device)
