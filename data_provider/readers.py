"""Readers load raw arrays and split ends only; windowing lives in one place (windows.py)."""
import logging
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from utils.errors import ConfigError
from utils.log import GROUP

group_log = logging.getLogger(GROUP)

ETT_NAMES = ("ETTh1", "ETTh2", "ETTm1", "ETTm2")


@dataclass
class RawSeries:
    values: np.ndarray  # (T, C) float64, target channel last
    columns: list
    dates: pd.DatetimeIndex | None
    split_ends: tuple  # exclusive ends of train, val and test


def _ratio_split(n: int) -> tuple:
    """70/10/20 split of the custom-data convention (TSLib, OpenLTM)."""
    n_train, n_test = int(n * 0.7), int(n * 0.2)
    return n_train, n - n_test, n


def _check_values(values: np.ndarray, columns: list, path: str) -> None:
    if values.size == 0 or values.shape[0] == 0:
        raise ConfigError(f"{path}: no data rows")
    bad = ~np.isfinite(values)
    if bad.any():
        col = int(np.argmax(bad.any(axis=0)))
        row = int(np.argmax(bad[:, col]))
        raise ConfigError(f"{path}: {int(bad.sum())} NaN/inf values (first in column {columns[col]!r}, "
                          f"row {row}); clean or impute the data first")


def _read_csv(path: str) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{path}: the file is empty") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as e:
        raise ConfigError(f"{path}: cannot read as CSV ({e})") from None


def dated_frame(df: pd.DataFrame, target: str | None, source: str) -> tuple:
    """(values, columns, dates) of a frame whose first column is a date and the rest numeric.

    The target column is moved last, where covariate mode and the metrics expect it.
    """
    if df.shape[1] < 2 or len(df) == 0:
        raise ConfigError(f"{source}: needs a date column followed by at least one value column and one row")
    try:
        dates = pd.DatetimeIndex(pd.to_datetime(df.iloc[:, 0]))
    except (ValueError, TypeError):
        raise ConfigError(f"{source}: the first column {df.columns[0]!r} must hold dates") from None
    check_timestamps(dates, source)
    data = df.iloc[:, 1:]
    non_numeric = [c for c in data.columns if not pd.api.types.is_numeric_dtype(data[c])]
    if non_numeric:
        raise ConfigError(f"{source}: non-numeric column(s) {non_numeric}; every column after the date must be numbers")
    empty = [c for c in data.columns if data[c].isna().all()]
    if empty:
        raise ConfigError(f"{source}: empty column(s) {empty}; drop them or fill them in")
    columns = list(data.columns)
    if target is not None:
        if target not in columns:
            raise ConfigError(f"{source}: --target {target!r} is not a column (columns: {columns})")
        columns = [c for c in columns if c != target] + [target]
    values = data[columns].to_numpy(dtype=np.float64)
    _check_values(values, columns, source)
    return values, columns, dates


def check_timestamps(dates: pd.DatetimeIndex, source: str) -> None:
    """Rows must be in time order without repeats (windows would silently mix up time otherwise); irregular
    gaps are allowed with a warning. Rows are numbered from 0, the first data row."""
    if dates.hasnans:
        raise ConfigError(f"{source}: missing date at row {int(np.argmax(dates.isna()))}")
    steps = dates[1:] - dates[:-1]
    backwards = np.flatnonzero(steps <= pd.Timedelta(0))
    if len(backwards):
        row = int(backwards[0]) + 1
        what = "duplicated" if steps[row - 1] == pd.Timedelta(0) else "out of order"
        raise ConfigError(f"{source}: timestamps {what} at rows {row - 1} and {row} ({dates[row - 1]} then "
                          f"{dates[row]}); sort the rows by time and drop repeated ones")
    if len(steps):
        usual = steps.median()
        irregular = np.flatnonzero(steps != usual)
        if len(irregular):
            group_log.warning("%s: %d irregular gaps between rows (the usual step is %s), the first after row %d "
                              "(%s then %s); windows span them as if the steps were equal", source, len(irregular),
                              usual, irregular[0], dates[irregular[0]], dates[irregular[0] + 1])


def read_ett(path: str, name: str, target: str) -> RawSeries:
    """ETT with the standard 12/4/4-month borders (Informer, Autoformer, TSLib)."""
    values, columns, dates = dated_frame(_read_csv(path), target, path)
    month = 30 * 24 * (4 if name.startswith("ETTm") else 1)
    ends = (12 * month, 16 * month, 20 * month)
    if len(values) < ends[-1]:
        raise ConfigError(f"{path}: {name} needs at least {ends[-1]} rows for the standard 12/4/4-month split, "
                          f"found {len(values)}")
    return RawSeries(values, columns, dates, ends)


def read_custom(path: str, target: str) -> RawSeries:
    return custom_series(_read_csv(path), target, path)


def custom_series(df: pd.DataFrame, target: str, source: str) -> RawSeries:
    values, columns, dates = dated_frame(df, target, source)
    return RawSeries(values, columns, dates, _ratio_split(len(values)))


def read_npy(path: str) -> RawSeries:
    """A (T,) or (T, C) numeric array; the last channel is the target."""
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read as a .npy array ({e})") from None
    if not np.issubdtype(arr.dtype, np.number):
        raise ConfigError(f"{path}: array dtype {arr.dtype} is not numeric")
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ConfigError(f"{path}: expected a (time, channels) array, got shape {arr.shape}")
    values = arr.astype(np.float64)
    columns = [f"ch{i}" for i in range(values.shape[1])]
    _check_values(values, columns, path)
    return RawSeries(values, columns, None, _ratio_split(len(values)))


def _where_to_set(path: str) -> str:
    """The experiment scripts build --root_path from DATA_ROOT (scripts/launch.sh exports it): name that."""
    root = os.environ.get("DATA_ROOT")
    if root and os.path.normpath(path).startswith(os.path.normpath(root) + os.sep):
        return f"the script reads its data under DATA_ROOT={root}: set DATA_ROOT to the folder that holds " \
               f"{os.path.relpath(os.path.dirname(path), root)}/"
    return "set --root_path/--data_path"


def read_series(data: str, path: str, target: str) -> RawSeries:
    if not os.path.exists(path):
        raise ConfigError(f"data file not found: {path} ({_where_to_set(path)})")
    if not os.path.isfile(path):
        raise ConfigError(f"data path is not a file: {path}")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"data file is not readable: {path}")
    if data in ETT_NAMES:
        return read_ett(path, data, target)
    if path.endswith(".npy"):
        return read_npy(path)
    return read_custom(path, target)
