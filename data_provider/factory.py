"""From flags to the train/val/test WindowDatasets: read, scale on train only, add time features."""
import functools
import io
import logging
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from data_provider import corpus, datasets, m4, protocols
from data_provider.readers import Table, check_file, check_values, parse_dates
from data_provider.scaling import StandardScale
from data_provider.windows import Batch, WindowDataset, autoregressive_offsets, direct_offsets, seeded_subset
from utils.errors import ConfigError
from utils.files import write_atomic
from utils.fingerprints import content_fingerprint, file_fingerprint
from utils.log import GROUP

group_log = logging.getLogger(GROUP)


@dataclass
class DataBundle:
    name: str             # the dataset's benchmark name (ETTh1, ECL, ILI, ...) or its file name
    datasets: dict        # split name -> WindowDataset
    n_channels: int       # channels the model sees (1 in univariate mode)
    n_marks: int          # time-feature width (0 when the model does not use them)
    columns: list
    scaler: StandardScale | None  # None: a corpus, scaled per series or per window (data_provider/corpus.py)
    file: str             # the data file's name and content fingerprint: part of a run's identity
    fingerprint: str
    season: int = 1       # steps of the series' natural cycle (seasonality): MASE and MSIS scale by it
    reference: str | None = None  # the name of the test windows' reference forecast (M4's naive2), OWA's base
    standardised: bool = True  # the windows hold standardised values (M4's: the original ones)

    def first_window(self) -> Batch:
        """The first training window, a batch of one on the CPU: what the model contract's checks run."""
        return Batch(*(None if t is None else t.cpu() for t in self.datasets["train"].gather(torch.tensor([0]))))


def data_file(args) -> str:
    """The file --data reads: --data_path under --root_path, or the dataset's standard file there."""
    entry = datasets.resolve(args.data, args.data_path)
    name = args.data_path or entry.file
    if name is None:
        raise ConfigError(f"--data {entry.name} reads any file of its format: name it with --data_path")
    return os.path.join(args.root_path, name)


def dataset_name(args) -> str:
    """The benchmark's name (ETTh1, Weather, ...), or the file's for a generic one (custom, PEMS)."""
    entry = datasets.resolve(args.data, args.data_path)
    return entry.name if entry.file is not None else os.path.splitext(os.path.basename(args.data_path))[0]


# TSLib's time features per sampling frequency (utils/timefeatures.py there): each scaled to [-0.5, 0.5]
_CALENDAR = {
    "second": lambda d: d.second / 59.0, "minute": lambda d: d.minute / 59.0, "hour": lambda d: d.hour / 23.0,
    "day_of_week": lambda d: d.day_of_week / 6.0, "day_of_month": lambda d: (d.day - 1) / 30.0,
    "day_of_year": lambda d: (d.day_of_year - 1) / 365.0, "month": lambda d: (d.month - 1) / 11.0,
    "week": lambda d: (d.isocalendar().week.to_numpy() - 1) / 52.0}
_DAY = ("day_of_week", "day_of_month", "day_of_year")
FEATURE_SETS = {"second": ("second", "minute", "hour", *_DAY), "minute": ("minute", "hour", *_DAY),
                "hour": ("hour", *_DAY), "day": _DAY, "week": ("day_of_month", "week"), "month": ("month",)}
_FREQ_UNITS = {"s": "second", "sec": "second", "t": "minute", "min": "minute", "h": "hour", "d": "day", "b": "day",
               "w": "week", "m": "month", "q": "month"}


def feature_set(freq: str) -> str:
    """The time-feature set of a --freq (TSLib's names: s, t/min, h, d, b, w, m, q, with a multiple: 15min)."""
    unit = freq.lstrip("0123456789").lower()
    if unit not in _FREQ_UNITS:
        raise ConfigError(f"--freq {freq!r}: not a sampling frequency; use s, t (or min), h, d, b, w, m or q, "
                          "optionally with a multiple (15min)")
    return _FREQ_UNITS[unit]


# GluonTS's seasonalities (time_feature/seasonality.py), which GIFT-Eval's MASE uses: below a step of `below`, the
# cycle of `unit`s, divided by the step's multiple where it divides (15 minutes: 1440 / 15 = 96), else 1
_SEASON_UNITS = ((pd.Timedelta(minutes=1), pd.Timedelta(seconds=1), 3600),
                 (pd.Timedelta(hours=1), pd.Timedelta(minutes=1), 1440),
                 (pd.Timedelta(days=1), pd.Timedelta(hours=1), 24))


def seasonality(dates: pd.DatetimeIndex | None) -> int:
    """Steps of the cycle of series sampled at `dates`' median step: a day for hours and minutes, an hour for
    seconds, a year for months (12) and quarters (4); 1 (the naive forecast's scale) for days, weeks, years and
    series without dates."""
    if dates is None or len(dates) < 2:
        return 1
    step = (dates[1:] - dates[:-1]).median()
    for below, unit, cycle in _SEASON_UNITS:
        if step < below:
            n, rest = divmod(step, unit)
            return cycle // n if n and not rest and cycle % n == 0 else 1
    days = step / pd.Timedelta(days=1)
    return 12 if 28 <= days <= 31 else 4 if 89 <= days <= 92 else 1


def time_features(dates: pd.DatetimeIndex | None, length: int, freq: str | None = None) -> np.ndarray:
    """Calendar features in [-0.5, 0.5] (TSLib's timeenc=1): TSLib's set for --freq, else hour, day of week,
    day of month and day of year, with minute first for sub-hourly data. Zeros for data without dates."""
    if dates is None:
        return np.zeros((length, 1))
    if freq is None:
        step = (dates[1:] - dates[:-1]).median() if length > 1 else pd.Timedelta(hours=1)
        names = FEATURE_SETS["minute" if step < pd.Timedelta(hours=1) else "hour"]
    else:
        names = FEATURE_SETS[feature_set(freq)]
    return np.stack([np.asarray(_CALENDAR[n](dates), dtype=np.float64) for n in names], axis=1) - 0.5


def load_table(args, entry: datasets.Dataset, path: str, is_main: bool) -> tuple:
    """(Table, content fingerprint of its file). A file read before by this process, unchanged since (same
    inode, size, modification and change times), is not read again: a sweep worker runs many cells on one
    dataset."""
    if entry.generate is not None and not os.path.isfile(path):
        # Every rank generates the same series in memory; only the main rank writes it.
        text = entry.generate()
        if is_main:
            write_atomic(path, lambda f: f.write(text.encode()))
        return entry.read(io.StringIO(text), args.target), content_fingerprint(text.encode())
    check_file(path)
    st = os.stat(path)
    return _read_file(entry, os.path.realpath(path), args.target,
                      (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))


@functools.lru_cache(maxsize=4)
def _read_file(entry: datasets.Dataset, path: str, target: str | None, stat: tuple) -> tuple:
    return entry.read(path, target), file_fingerprint(path)


def _check_step(table: Table, entry: datasets.Dataset, path: str) -> None:
    """A benchmark read from a file sampled at another step is most likely the wrong file."""
    if entry.freq is None or table.dates is None or len(table.dates) < 2:
        return
    step = (table.dates[1:] - table.dates[:-1]).median()
    if step != pd.Timedelta(entry.freq):
        group_log.warning("%s: rows are %s apart, but %s is sampled every %s: is this the right file?", path, step,
                          entry.name, entry.freq)


def split_rows(entry: datasets.Dataset, n_rows: int, path: str, protocol: str = protocols.DEFAULT) -> tuple:
    """The rows each split forecasts under the protocol, and whether val and test windows look back before them."""
    chosen = protocols.registry()[protocol]
    try:
        if chosen.split is None:
            return entry.split(n_rows), entry.lookback
        return chosen.split(entry.name, n_rows)
    except ValueError as e:
        raise ConfigError(f"{path}: {entry.name} {e}") from None


def split_bounds(rows: dict, seq_len: int, lookback: bool = True) -> dict:
    """Rows each split's windows read: with lookback, val and test start seq_len early so that their first
    forecast is their first row; without, every window lies inside its split."""
    return {split: (begin - seq_len if lookback and split != "train" else begin, end)
            for split, (begin, end) in rows.items()}


_LISTED = 20  # columns named in the count of filled values (Traffic has 862)


def fill_missing(values: np.ndarray, rows: dict, columns: list, path: str, method: str) -> np.ndarray:
    """NaNs filled inside each split's segment of rows, from its first row to the next split's first (the last
    to its end): no split's values fill another's gaps (TSLib's PEMS). A val or test window that looks back
    into the split before reads that split's filled rows, as it reads its values. ffill: forward, then the
    leading gap backward; interpolate: linear in row order (windows treat rows as equally spaced), edges from
    the nearest value. The number filled per column is logged."""
    filled = values.copy()
    starts = sorted(rows.items(), key=lambda item: item[1][0])
    for i, (split, (begin, end)) in enumerate(starts):
        if i + 1 < len(starts):
            end = starts[i + 1][1][0]  # rows no split forecasts (between Solar's val and test) join the one before
        if end <= begin:
            continue  # an empty split: its own check names it
        frame = pd.DataFrame(values[begin:end])
        frame = frame.ffill().bfill() if method == "ffill" else frame.interpolate(limit_direction="both")
        filled[begin:end] = frame.to_numpy()
        empty = np.isnan(filled[begin:end]).all(axis=0)
        if empty.any():
            raise ConfigError(f"{path}: channel {columns[int(np.argmax(empty))]!r} has no values in the {split} "
                              "split, nothing to fill its gaps from")
    counts = (np.isnan(values) & ~np.isnan(filled)).sum(axis=0)
    if counts.any():
        per_column = ", ".join(f"{columns[c]!r} {counts[c]}" for c in np.flatnonzero(counts)[:_LISTED])
        more = np.count_nonzero(counts) - _LISTED
        group_log.info("%s: filled %d missing values (%s) inside each split: %s%s", path, counts.sum(), method,
                       per_column, f" and {more} more columns" if more > 0 else "")
    return filled


def _row_major(values: np.ndarray, device: torch.device) -> torch.Tensor:
    """(time, channel) float32 in row-major order, in one conversion: a window is then one contiguous run
    (pandas hands out column-major values)."""
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(device)


def split_offsets(args) -> dict:
    """The target offsets of each split's windows: next-token (or direct) for fitting, the horizon for test."""
    last = direct_offsets(args.seq_len, args.output_token_len)
    fit = last if args.nonautoregressive else \
        autoregressive_offsets(args.seq_len, args.input_token_len, args.output_token_len)
    return {"train": fit, "val": last if args.valid_last else fit,
            "test": direct_offsets(args.seq_len, args.test_pred_len)}


def _check_windows(split: str, ds, rows: int) -> None:
    if ds.n_windows < 1:
        raise ConfigError(f"the {split} split has {rows} time steps (lookback included) but one window needs "
                          f"{ds.window_len} (seq_len + output); use a shorter --seq_len/--output_token_len/"
                          "--test_pred_len or more data")


def build_data(args, device: torch.device, is_main: bool, uses_marks: bool, wait_for_main=None) -> DataBundle:
    """wait_for_main(ready, what, timeout): how a rank waits for a file the main rank writes (utils/peers.py;
    None: a process on its own, which waits for no one)."""
    if args.data == corpus.NAME:
        return corpus_data(args, device, is_main, wait_for_main)
    if args.data == m4.NAME:
        return m4.short_term_data(args, device, uses_marks)
    entry = datasets.resolve(args.data, args.data_path)
    path = data_file(args)
    table, fingerprint = load_table(args, entry, path, is_main)
    table = parse_dates(table, path, args.date_format, args.dayfirst)
    if args.target_only:  # TSLib's --features S: the target (last) channel alone
        table = Table(table.values[:, -1:], table.columns[-1:], table.dates)
    fill = args.fill_missing or entry.fill_missing
    check_values(table.values, table.columns, path, allow_missing=fill is not None)
    _check_step(table, entry, path)
    rows, lookback = split_rows(entry, len(table.values), path, args.protocol)
    (train_begin, train_end) = rows["train"]
    if train_end - train_begin < 2:
        raise ConfigError(f"{path}: {len(table.values)} rows leave {train_end - train_begin} to train on")
    scaler = StandardScale.fit(table.values[train_begin:train_end], skip_missing=fill is not None)
    values = scaler.transform(table.values)
    if fill is not None:
        values = fill_missing(values, rows, table.columns, path, fill)
    series = _row_major(values, device)
    marks = _row_major(time_features(table.dates, len(values), args.freq), device) if uses_marks else None

    offsets = split_offsets(args)
    windows = {}
    for split, (begin, end) in split_bounds(rows, args.seq_len, lookback).items():
        windows[split] = WindowDataset(series, marks, max(begin, 0), end, args.seq_len, offsets[split],
                                       args.univariate)
        _check_windows(split, windows[split], end - max(begin, 0))
    if args.subset_rand_ratio < 1:
        windows["train"] = random_subset(windows["train"], args.subset_rand_ratio, args.seed)
    n_channels = 1 if args.univariate else series.shape[1]
    return DataBundle(dataset_name(args), windows, n_channels, 0 if marks is None else marks.shape[1],
                      table.columns, scaler, os.path.basename(path), fingerprint, seasonality(table.dates))


def corpus_data(args, device: torch.device, is_main: bool, wait_for_main=None) -> DataBundle:
    """The windows of a corpus store (built here by the main rank when missing; the others wait for it)."""
    store = corpus.store_path(args.root_path, args.corpus_store)
    if not os.path.isfile(os.path.join(store, "manifest.json")):
        if not os.path.isdir(args.root_path):
            raise ConfigError(f"--root_path {args.root_path}: no such folder of series files")
        if is_main:
            corpus.build(args.root_path, store)
        elif wait_for_main is not None:
            wait_for_main(lambda: os.path.isfile(os.path.join(store, "manifest.json")),
                          f"rank 0 to build the corpus store {store}", args.dist_timeout)
    reason = corpus.stale(store, args.root_path)
    if reason:
        raise ConfigError(f"corpus store {store} does not match the files in {args.root_path}: {reason}; delete the "
                          "store to rebuild it")
    opened = corpus.Corpus(store)
    windows = {split: corpus.CorpusWindows(opened, split, args.seq_len, y_offsets, args.corpus_norm, device)
               for split, y_offsets in split_offsets(args).items()}
    for split, ds in windows.items():
        if ds.n_windows < 1:
            begin, end = opened.bounds(split, args.seq_len)
            raise ConfigError(f"no series of corpus {store} has a {split} part long enough for one window of "
                              f"{ds.window_len} steps (the longest has {int((end - begin).max())}, lookback "
                              "included); use a shorter --seq_len/--output_token_len/--test_pred_len")
    if args.subset_rand_ratio < 1:
        n = windows["train"].n_windows
        windows["train"].subset = seeded_subset(n, max(int(n * args.subset_rand_ratio), 1), args.seed)
    name = os.path.basename(os.path.normpath(args.root_path))
    return DataBundle(name, windows, 1, 0, ["value"], None, f"corpus {name}", opened.fingerprint)


def random_subset(ds: WindowDataset, ratio: float, seed: int) -> WindowDataset:
    """A seeded random subset of training windows (few-shot), the same on every rank."""
    keep = max(int(ds.n_windows * ratio), 1)
    generator = torch.Generator().manual_seed(seed)
    ds.subset = torch.randperm(ds.n_windows, generator=generator)[:keep].sort().values.to(ds.series.device)
    return ds
