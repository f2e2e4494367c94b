"""Readers of file formats: raw values, column names and dates only. Splits belong to the dataset entries
(data_provider/datasets/), scaling to the factory, windowing to windows.py."""
import logging
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from utils.errors import ConfigError
from utils.log import GROUP

group_log = logging.getLogger(GROUP)


@dataclass
class Table:
    """What a reader returns: raw values and their names; splitting and scaling happen in the factory."""
    values: np.ndarray                # (T, C) float64, target channel last
    columns: list
    dates: pd.DatetimeIndex | None    # None: the format has no timestamps (time features are zeros)


def _where(source) -> str:
    return source if isinstance(source, str) else "generated data"


def check_values(values: np.ndarray, columns: list, path: str, allow_missing: bool = False) -> None:
    """Rows present and every value finite (NaN allowed where the dataset fills missing values)."""
    if values.size == 0 or values.shape[0] == 0:
        raise ConfigError(f"{path}: no data rows")
    bad = np.isinf(values) if allow_missing else ~np.isfinite(values)
    if bad.any():
        col = int(np.argmax(bad.any(axis=0)))
        row = int(np.argmax(bad[:, col]))
        raise ConfigError(f"{path}: {int(bad.sum())} NaN/inf values (first in column {columns[col]!r}, "
                          f"row {row}); clean or impute the data first")


def _read_csv(source, **kwargs) -> pd.DataFrame:
    try:
        return pd.read_csv(source, **kwargs)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{_where(source)}: the file is empty") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as e:
        raise ConfigError(f"{_where(source)}: cannot read as CSV ({e})") from None


def dated_frame(df: pd.DataFrame, target: str | None, source: str) -> Table:
    """The table of a frame whose first column is a date and the rest numeric.

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
    return Table(data[columns].to_numpy(dtype=np.float64), columns, dates)


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


def read_dated_csv(source, target: str | None) -> Table:
    """A CSV whose first column is a date (ETT, TSLib's custom files)."""
    return dated_frame(_read_csv(source), target, _where(source))


def read_npy(path: str) -> Table:
    """A (T,) or (T, C) numeric array; the last channel is the target."""
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read as a .npy array ({e})") from None
    return _array_table(arr, path)


def read_by_extension(source, target: str | None) -> Table:
    """.npy, .npz (PEMS layout), .txt (headerless numbers), anything else a CSV with a date column first."""
    suffix = os.path.splitext(source)[1] if isinstance(source, str) else ""
    if suffix == ".npy":
        return read_npy(source)
    if suffix == ".npz":
        return read_npz_first_feature(source)
    if suffix == ".txt":
        return read_headerless(source)
    return read_dated_csv(source, target)


def read_headerless(source, target: str | None = None) -> Table:
    """Comma-separated numbers, one row per time step, no header and no dates (Solar-Energy's solar_AL.txt)."""
    frame = _read_csv(source, header=None)
    non_numeric = [i for i in frame.columns if not pd.api.types.is_numeric_dtype(frame[i])]
    if non_numeric:
        raise ConfigError(f"{_where(source)}: column {non_numeric[0]} is not numeric (expected comma-separated "
                          "numbers without a header)")
    return _array_table(frame.to_numpy(dtype=np.float64), _where(source))


def read_npz_first_feature(path: str, target: str | None = None) -> Table:
    """An .npz whose `data` array is (time, node, feature): the first feature of every node (PEMS traffic flow)."""
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read as an .npz archive ({e})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):
        raise ConfigError(f"{path}: a single array, not an .npz archive with a 'data' array")
    with archive:
        if "data" not in archive.files:
            raise ConfigError(f"{path}: no 'data' array in the .npz (found {archive.files})")
        arr = archive["data"]
    if arr.ndim != 3 or arr.shape[2] == 0:
        raise ConfigError(f"{path}: expected 'data' of shape (time, node, feature), got {arr.shape}")
    return _array_table(arr[:, :, 0], path)


def _array_table(arr: np.ndarray, path: str) -> Table:
    if not np.issubdtype(arr.dtype, np.number):
        raise ConfigError(f"{path}: array dtype {arr.dtype} is not numeric")
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ConfigError(f"{path}: expected a (time, channels) array, got shape {arr.shape}")
    return Table(arr.astype(np.float64), [f"ch{i}" for i in range(arr.shape[1])], None)


def _where_to_set(path: str) -> str:
    """The experiment scripts build --root_path from DATA_ROOT (scripts/launch.sh exports it): name that."""
    root = os.environ.get("DATA_ROOT")
    if root and os.path.normpath(path).startswith(os.path.normpath(root) + os.sep):
        return f"the script reads its data under DATA_ROOT={root}: set DATA_ROOT to the folder that holds " \
               f"{os.path.relpath(os.path.dirname(path), root)}/"
    return "set --root_path/--data_path"


def check_file(path: str) -> None:
    if not os.path.exists(path):
        raise ConfigError(f"data file not found: {path} ({_where_to_set(path)})")
    if not os.path.isfile(path):
        raise ConfigError(f"data path is not a file: {path}")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"data file is not readable: {path}")
