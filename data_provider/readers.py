"""Readers of file formats: raw values, column names and dates only. Splits belong to the dataset entries
(data_provider/datasets/), scaling to the factory, windowing to windows.py."""
import logging
import os
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pandas.tseries.api import guess_datetime_format

from utils.errors import ConfigError
from utils.log import GROUP

group_log = logging.getLogger(GROUP)


@dataclass
class Table:
    """What a reader returns: raw values and their names; splitting and scaling happen in the factory."""
    values: np.ndarray                # (T, C) float64, target channel last
    columns: list
    # the date column as written, which parse_dates reads with the run's --date_format/--dayfirst (a reader of
    # its own may return a DatetimeIndex); None: the format has no timestamps (time features are zeros)
    dates: pd.Series | pd.DatetimeIndex | None


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
        if allow_missing:
            raise ConfigError(f"{path}: {int(bad.sum())} infinite values (first in column {columns[col]!r}, row "
                              f"{row}); clean the data first: only NaN marks a missing value")
        raise ConfigError(f"{path}: {int(bad.sum())} NaN/inf values (first in column {columns[col]!r}, "
                          f"row {row}); clean or impute the data first, or fill NaN with --fill_missing ffill "
                          "or interpolate")


def _read_csv(source, **kwargs) -> pd.DataFrame:
    try:
        return pd.read_csv(source, **kwargs)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{_where(source)}: the file is empty") from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as e:
        raise ConfigError(f"{_where(source)}: cannot read as CSV ({e})") from None


_CSV_LAYOUT = "the CSV format needs a date column first (date,ch1,...,target)"


def dated_frame(df: pd.DataFrame, target: str | None, source: str) -> Table:
    """The table of a frame whose first column holds dates (kept as written: parse_dates reads them) and the rest
    numbers. The target column is moved last, where covariate mode and the metrics expect it.
    """
    if df.shape[1] < 2 or len(df) == 0:
        raise ConfigError(f"{source}: needs a date column followed by at least one value column and one row")
    data = df.iloc[:, 1:]
    non_numeric = [c for c in data.columns if not pd.api.types.is_numeric_dtype(data[c])]
    if non_numeric:
        raise ConfigError(f"{source}: non-numeric column(s) {non_numeric}; every column after the date must be numbers")
    empty = [c for c in df.columns if df[c].isna().all()]
    if empty:
        raise ConfigError(f"{source}: empty column(s) {empty}; drop them or fill them in")
    columns = list(data.columns)
    if target is not None:
        if target == df.columns[0]:
            raise ConfigError(f"{source}: --target {target!r} is the first column, which the CSV format keeps for "
                              "the dates (date,ch1,...,target)")
        if target not in columns:
            raise ConfigError(f"{source}: --target {target!r} is not a column (columns: {columns})")
        columns = [c for c in columns if c != target] + [target]
    return Table(data[columns].to_numpy(dtype=np.float64), columns, df.iloc[:, 0])


def parse_dates(table: Table, source: str, date_format: str | None = None, dayfirst: bool = False) -> Table:
    """The table with its dates read as timestamps and checked (check_timestamps): in --date_format, else in the
    format pandas infers from the first date (day first with --dayfirst). One format for the whole column keeps
    parsing vectorised, so a date that does not fit it is an error naming its row, not a slow element-wise pass."""
    if table.dates is None:
        if date_format is not None or dayfirst:
            raise ConfigError(f"{source}: --date_format and --dayfirst read a date column, and this file has none")
        return table
    dates = _read_dates(table.dates, source, date_format, dayfirst)
    check_timestamps(dates, source)
    return Table(table.values, table.columns, dates)


def _read_dates(column: pd.Series, source: str, date_format: str | None, dayfirst: bool) -> pd.DatetimeIndex:
    if pd.api.types.is_datetime64_any_dtype(column):  # parsed by a reader of its own
        return pd.DatetimeIndex(column)
    name = column.name
    if pd.api.types.is_numeric_dtype(column):
        # pandas would take integers for nanoseconds since 1970
        if date_format is None:
            raise ConfigError(f"{source}: the first column {name!r} holds numbers, not dates: {_CSV_LAYOUT}; for a "
                              "file without dates use .npy or a headerless .txt of comma-separated numbers (--data "
                              "custom), for dates written as numbers (20200101) give --date_format (%Y%m%d)")
        # dates written as numbers (20200101), read as text; a missing one makes the column float (20200101.0)
        whole = (column.dropna() % 1 == 0).all()
        column = (column.astype("Int64") if whole else column).astype(str).where(column.notna())
    row = int(np.argmax(column.notna().to_numpy()))
    first = column.iloc[row]
    fmt = date_format or _infer_format(first, row, name, source, dayfirst)
    try:
        dates = pd.DatetimeIndex(pd.to_datetime(column, format=fmt, dayfirst=dayfirst))
    except (ValueError, TypeError) as e:  # OutOfBoundsDatetime is a ValueError
        bad = _first_unparsed(column, fmt, dayfirst)
        if bad is None:  # no single date but the column (time zones mixed): pandas' first line says which
            raise ConfigError(f"{source}: cannot read the dates of column {name!r}: {str(e).splitlines()[0]}") \
                from None
        value = column.iloc[bad]
        if date_format is not None:
            raise ConfigError(f"{source}: the date {value!r} at row {bad} does not match --date_format "
                              f"{date_format!r}") from None
        hint = "" if dayfirst else "for day-first dates add --dayfirst; "
        raise ConfigError(f"{source}: the date {value!r} at row {bad} does not match the format {fmt} of the "
                          f"first date {first!r}: {hint}for another format, or one that varies, give --date_format "
                          "(a strftime format, ISO8601 or mixed)") from None
    if date_format is None and not dayfirst and _month_first(fmt) and (dates.day <= 12).all():
        group_log.warning("%s: dates such as %r are read month first (%s) and no day is above 12; add --dayfirst if "
                          "they are day first", source, first, fmt)
    return dates


def _first_unparsed(column: pd.Series, fmt: str, dayfirst: bool) -> int | None:
    """The row of the first date that fmt does not read (None: each does, but not the column together)."""
    try:
        parsed = pd.to_datetime(column, format=fmt, dayfirst=dayfirst, errors="coerce")
    except (ValueError, TypeError):
        return None
    bad = np.flatnonzero(parsed.isna().to_numpy() & column.notna().to_numpy())
    return int(bad[0]) if len(bad) else None


def _infer_format(first: str, row: int, name, source: str, dayfirst: bool) -> str:
    """The format of the first date, which the whole column is then parsed in."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a first date such as 13/02/2020 shows day first itself
        fmt = guess_datetime_format(first, dayfirst=dayfirst)
    if fmt is None:
        try:
            pd.to_datetime(first, dayfirst=dayfirst)
        except (ValueError, OverflowError):
            raise ConfigError(f"{source}: the first column {name!r} holds {first!r} at row {row}, not a date: "
                              f"{_CSV_LAYOUT}; for dates in another format give --date_format (a strftime format "
                              "such as %d.%m.%Y %H:%M)") from None
        raise ConfigError(f"{source}: the format of the date {first!r} at row {row} cannot be inferred: give it "
                          "with --date_format (a strftime format such as %m/%d/%Y %I:%M %p, or mixed to parse "
                          "each date on its own, slowly)")
    if dayfirst and fmt.startswith("%Y"):
        raise ConfigError(f"{source}: --dayfirst, but the dates start with the year ({first!r} at row {row}): "
                          "drop --dayfirst")
    return fmt


def _month_first(fmt: str) -> bool:
    """Whether a format reads day and month in the order that could be the other way round (01/02/2020)."""
    return "%m" in fmt and "%d" in fmt and fmt.index("%m") < fmt.index("%d") and not fmt.startswith("%Y")


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


def where_to_set(path: str) -> str | None:
    """The experiment scripts build --root_path from DATA_ROOT (scripts/launch.sh exports it): name that (None: the
    path is not under it)."""
    root = os.environ.get("DATA_ROOT")
    if root and os.path.normpath(path).startswith(os.path.normpath(root) + os.sep):
        return f"the script reads its data under DATA_ROOT={root}: set DATA_ROOT to the folder that holds " \
               f"{os.path.relpath(os.path.dirname(path), root)}/"
    return None


def check_file(path: str) -> None:
    if not os.path.exists(path):
        raise ConfigError(f"data file not found: {path} ({where_to_set(path) or 'set --root_path/--data_path'})")
    if not os.path.isfile(path):
        raise ConfigError(f"data path is not a file: {path}")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"data file is not readable: {path}")
