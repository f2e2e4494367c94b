"""From flags to the train/val/test WindowDatasets: read, scale on train only, add time features."""
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from data_provider import synthetic
from data_provider.readers import ETT_NAMES, RawSeries, custom_series, read_series
from data_provider.windows import WindowDataset, autoregressive_offsets, direct_offsets
from utils.errors import ConfigError
from utils.identity import content_fingerprint, file_fingerprint

DATA_NAMES = ETT_NAMES + ("custom", "synthetic")
# Standard file names of the long-term forecasting benchmarks -> the names the papers use
BENCHMARK_FILES = {"weather": "Weather", "electricity": "ECL", "traffic": "Traffic", "exchange_rate": "Exchange",
                   "national_illness": "ILI"}


@dataclass(frozen=True)
class StandardScale:
    """Per-channel mean and population std of the training rows: what sklearn's StandardScaler computes,
    without importing sklearn, which every run's start-up would pay for (docs/performance.md)."""
    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def fit(cls, rows: np.ndarray) -> "StandardScale":
        rows = np.asarray(rows, dtype=np.float64)
        mean, var = rows.mean(axis=0), rows.var(axis=0)
        # a channel whose variance is within the rounding error of the two-pass variance is constant: it is
        # centred, not divided by ~0 (sklearn's test, Chan, Golub & LeVeque)
        eps, n = np.finfo(np.float64).eps, len(rows)
        constant = var <= n * eps * var + (n * mean * eps) ** 2
        return cls(mean, np.where(constant, 1.0, np.sqrt(var)))

    def transform(self, values: np.ndarray) -> np.ndarray:
        return (values - self.mean) / self.std


@dataclass
class DataBundle:
    name: str             # the dataset's benchmark name (ETTh1, ECL, ILI, ...) or its file name
    datasets: dict        # split name -> WindowDataset
    n_channels: int       # channels the model sees (1 in univariate mode)
    n_marks: int          # time-feature width (0 when the model does not use them)
    columns: list
    scaler: StandardScale
    file: str             # the data file's name and content fingerprint: part of a run's identity
    fingerprint: str


def data_file(args) -> str:
    name = args.data_path or {"synthetic": "synthetic.csv", "custom": None}.get(args.data, f"{args.data}.csv")
    if name is None:
        raise ConfigError("--data custom needs --data_path (a CSV with a date column first, or a .npy array)")
    return os.path.join(args.root_path, name)


def dataset_name(args) -> str:
    if args.data != "custom":
        return args.data
    stem = os.path.splitext(os.path.basename(args.data_path))[0]
    return BENCHMARK_FILES.get(stem, stem)


def time_features(dates: pd.DatetimeIndex | None, length: int) -> np.ndarray:
    """Calendar features scaled to [-0.5, 0.5] (TSLib's timeenc=1); minute only for sub-hourly data."""
    if dates is None:
        return np.zeros((length, 1))
    feats = [dates.hour / 23.0, dates.day_of_week / 6.0, (dates.day - 1) / 30.0, (dates.day_of_year - 1) / 365.0]
    step = (dates[1:] - dates[:-1]).median() if length > 1 else pd.Timedelta(hours=1)
    if step < pd.Timedelta(hours=1):
        feats.insert(0, dates.minute / 59.0)
    return np.stack([np.asarray(f, dtype=np.float64) for f in feats], axis=1) - 0.5


def load_raw(args, is_main: bool) -> tuple:
    """(RawSeries, content fingerprint of its file)."""
    path = data_file(args)
    if args.data == "synthetic" and not os.path.isfile(path):
        # Every rank generates the same seeded series in memory; only the main rank writes it.
        frame = synthetic.generate()
        text = synthetic.csv_text(frame)
        if is_main:
            synthetic.write_text(text, path)
        return custom_series(frame, args.target, path), content_fingerprint(text.encode())
    raw = read_series(args.data, path, args.target)
    return raw, file_fingerprint(path)


def split_bounds(split_ends: tuple, seq_len: int) -> dict:
    """Row ranges per split; val/test start seq_len early so their first window ends at the border."""
    train_end, val_end, test_end = split_ends
    return {"train": (0, train_end), "val": (train_end - seq_len, val_end), "test": (val_end - seq_len, test_end)}


def _row_major(values: np.ndarray, device: torch.device) -> torch.Tensor:
    """(time, channel) float32 in row-major order, in one conversion: a window is then one contiguous run
    (pandas hands out column-major values)."""
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(device)


def build_data(args, device: torch.device, is_main: bool, uses_marks: bool) -> DataBundle:
    raw, fingerprint = load_raw(args, is_main)
    train_end = raw.split_ends[0]
    scaler = StandardScale.fit(raw.values[:train_end])
    series = _row_major(scaler.transform(raw.values), device)
    marks = _row_major(time_features(raw.dates, len(raw.values)), device) if uses_marks else None

    last = direct_offsets(args.seq_len, args.output_token_len)
    fit = last if args.nonautoregressive else \
        autoregressive_offsets(args.seq_len, args.input_token_len, args.output_token_len)
    offsets = {"train": fit, "val": last if args.valid_last else fit,
               "test": direct_offsets(args.seq_len, args.test_pred_len)}

    datasets = {}
    for split, (begin, end) in split_bounds(raw.split_ends, args.seq_len).items():
        ds = WindowDataset(series, marks, max(begin, 0), end, args.seq_len, offsets[split], args.univariate)
        if ds.n_windows < 1:
            raise ConfigError(f"the {split} split has {end - max(begin, 0)} time steps (lookback included) but one "
                              f"window needs {ds.window_len} (seq_len {args.seq_len} + output); "
                              "use a shorter --seq_len/--output_token_len/--test_pred_len or more data")
        datasets[split] = ds
    if args.subset_rand_ratio < 1:
        datasets["train"] = random_subset(datasets["train"], args.subset_rand_ratio, args.seed)
    n_channels = 1 if args.univariate else series.shape[1]
    return DataBundle(dataset_name(args), datasets, n_channels, 0 if marks is None else marks.shape[1], raw.columns,
                      scaler, os.path.basename(data_file(args)), fingerprint)


def random_subset(ds: WindowDataset, ratio: float, seed: int) -> WindowDataset:
    """A seeded random subset of training windows (few-shot), the same on every rank."""
    keep = max(int(ds.n_windows * ratio), 1)
    generator = torch.Generator().manual_seed(seed)
    ds.subset = torch.randperm(ds.n_windows, generator=generator)[:keep].sort().values.to(ds.series.device)
    return ds
