"""The dataset registry: every benchmark is one entry whose file, format and split are the papers' code's
(TSLib's Dataset_ETT_*, Dataset_Custom, Dataset_Solar and Dataset_PEMS), read here from tiny generated files in
the same formats."""
import logging

import numpy as np
import pandas as pd
import pytest
import torch

from data_provider import datasets
from data_provider.factory import build_data, fill_missing
from data_provider.readers import parse_dates, read_dated_csv
from exp.config import parse_args, resolve
from exp.identity import run_config
from utils.errors import ConfigError

SEQ, PRED = 12, 4


def _args(root, *flags):
    return resolve(parse_args(["--root_path", str(root), "--model", "dlinear", "--nonautoregressive", "--seq_len",
                               str(SEQ), "--output_token_len", str(PRED), *flags]))


def _load(args, uses_marks=False):
    return build_data(args, torch.device("cpu"), True, uses_marks)


def _windows(bundle) -> dict:
    return {split: ds.n_windows for split, ds in bundle.datasets.items()}


def _tslib_lengths(borders1, borders2) -> dict:
    """len() of a TSLib dataset per split: its rows minus one window, plus one."""
    return {split: b2 - b1 - SEQ - PRED + 1 for split, b1, b2 in zip(("train", "val", "test"), borders1, borders2)}


def _dated_csv(path, n, step, columns=("a", "b", "OT"), seed=0):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({c: rng.normal(size=n).cumsum() for c in columns})
    frame.insert(0, "date", pd.date_range("2016-07-01", periods=n, freq=step))
    frame.to_csv(path, index=False)
    return frame


def test_the_long_term_forecasting_benchmarks_are_registered_with_their_standard_files():
    files = {name: (entry.file, entry.freq) for name, entry in datasets.registry().items()}
    assert files == {
        "ETTh1": ("ETTh1.csv", "1h"), "ETTh2": ("ETTh2.csv", "1h"),
        "ETTm1": ("ETTm1.csv", "15min"), "ETTm2": ("ETTm2.csv", "15min"),
        "Weather": ("weather.csv", "10min"), "ECL": ("electricity.csv", "1h"), "Traffic": ("traffic.csv", "1h"),
        "Exchange": ("exchange_rate.csv", "1D"), "ILI": ("national_illness.csv", "7D"),
        "Solar": ("solar_AL.txt", "10min"),
        "PEMS03": ("PEMS03.npz", "5min"), "PEMS04": ("PEMS04.npz", "5min"), "PEMS07": ("PEMS07.npz", "5min"),
        "PEMS08": ("PEMS08.npz", "5min"), "PEMS": (None, "5min"),
        "custom": (None, None), "synthetic": ("synthetic.csv", "1h")}
    ett = datasets.registry()["ETTm1"].split(70000)
    assert ett == {"train": (0, 34560), "val": (34560, 46080), "test": (46080, 57600)}  # 12/4/4 months of 15 min


def test_a_custom_format_benchmark_splits_as_tslib_and_is_the_same_run_by_either_name(tmp_path):
    n = 500
    _dated_csv(tmp_path / "weather.csv", n, "10min")
    by_name = _args(tmp_path, "--data", "Weather")
    tslib_style = _args(tmp_path, "--data", "custom", "--data_path", "weather.csv")
    assert tslib_style.data == by_name.data == "Weather"
    assert run_config(tslib_style, "weather.csv", "f", 1) == run_config(by_name, "weather.csv", "f", 1)
    bundle = _load(by_name)
    n_train, n_test = int(n * 0.7), int(n * 0.2)
    assert _windows(bundle) == _tslib_lengths([0, n_train - SEQ, n - n_test - SEQ], [n_train, n - n_test, n])
    assert bundle.name == "Weather" and bundle.columns == ["a", "b", "OT"]


def test_solar_is_headerless_text_with_its_own_validation_border_and_no_time_features(tmp_path):
    n = 1005
    values = np.random.default_rng(1).random((n, 3))
    np.savetxt(tmp_path / "solar_AL.txt", values, delimiter=",", fmt="%.6f")
    bundle = _load(_args(tmp_path, "--data", "Solar"), uses_marks=True)
    n_train, n_val, n_test = int(n * 0.7), int(n * 0.1), int(n * 0.2)
    assert n_train + n_val < n - n_test, "a row between val and test, as in TSLib"
    assert _windows(bundle) == _tslib_lengths([0, n_train - SEQ, n - n_test - SEQ],
                                              [n_train, n_train + n_val, n])
    assert bundle.n_marks == 1 and not bundle.datasets["train"].mark_windows.any()
    assert np.allclose(bundle.scaler.mean, values[:n_train].mean(axis=0), atol=1e-6)
    with pytest.raises(ConfigError, match="Solar files have no column names"):
        _args(tmp_path, "--data", "Solar", "--target", "OT")


def test_pems_splits_into_blocks_without_lookback_and_fills_gaps_inside_each_block(tmp_path):
    n, nodes = 400, 4
    flow = np.random.default_rng(2).random((n, nodes, 3)) * 100
    a, b = int(n * 0.6), int(n * 0.8)
    flow[a, 1, 0] = np.nan       # first row of val: back-filled from val, never from train
    flow[5:9, 2, 0] = np.nan     # a gap inside train: forward-filled
    np.savez(tmp_path / "PEMS08.npz", data=flow)
    args = _args(tmp_path, "--data", "PEMS", "--data_path", "PEMS08.npz")
    assert args.data == "PEMS08"
    bundle = _load(args)
    assert _windows(bundle) == _tslib_lengths([0, a, b], [a, b, n])
    first = flow[:, :, 0]
    assert np.allclose(bundle.scaler.mean, np.nanmean(first[:a], axis=0))
    scaled = bundle.datasets["train"].series.double().numpy()
    expect = bundle.scaler.transform(first)
    assert np.allclose(scaled[a, 1], expect[a + 1, 1], atol=1e-6) and np.allclose(scaled[5:9, 2], expect[4, 2])
    assert np.isfinite(scaled).all()


def test_ett_needs_its_twenty_months_and_a_benchmark_file_at_another_step_is_flagged(tmp_path, caplog):
    _dated_csv(tmp_path / "ETTh1.csv", 1000, "h")
    with pytest.raises(ConfigError, match="ETTh1 needs at least 14400 rows for its standard split, found 1000"):
        _load(_args(tmp_path, "--data", "ETTh1"))
    _dated_csv(tmp_path / "ETTh2.csv", 14500, "h", columns=("HUFL", "OT"))
    assert _windows(_load(_args(tmp_path, "--data", "ETTh2"))) == _tslib_lengths([0, 8640 - SEQ, 11520 - SEQ],
                                                                                  [8640, 11520, 14400])
    _dated_csv(tmp_path / "electricity.csv", 300, "D")
    with caplog.at_level(logging.WARNING):
        _load(_args(tmp_path, "--data", "ECL"))
    assert "rows are 1 days 00:00:00 apart, but ECL is sampled every 1h" in caplog.text


def test_generic_formats_name_runs_after_their_file(tmp_path):
    _dated_csv(tmp_path / "mine.csv", 300, "h")
    np.savez(tmp_path / "district.npz", data=np.random.default_rng(3).random((300, 2, 1)))
    assert _load(_args(tmp_path, "--data", "custom", "--data_path", "mine.csv")).name == "mine"
    assert _load(_args(tmp_path, "--data", "pems", "--data_path", "district.npz")).name == "district"
    with pytest.raises(ConfigError, match="--data PEMS reads any file of its format: name it with --data_path"):
        _load(_args(tmp_path, "--data", "PEMS"))


def test_bad_files_of_the_array_formats_are_one_clear_error(tmp_path):
    np.save(tmp_path / "flow.npy", np.ones((300, 2)))
    with pytest.raises(ConfigError, match="a single array, not an .npz archive"):
        _load(_args(tmp_path, "--data", "PEMS", "--data_path", "flow.npy"))
    flow = np.random.default_rng(4).random((300, 2, 1))
    flow[240:, 1, 0] = np.nan  # the whole test block of one sensor
    np.savez(tmp_path / "gap.npz", data=flow)
    with pytest.raises(ConfigError, match="channel 'ch1' has no values in the test split"):
        _load(_args(tmp_path, "--data", "PEMS", "--data_path", "gap.npz"))
    with pytest.raises(ValueError, match="freq 'h' is not a fixed step"):
        datasets.Dataset("x", "x.csv", None, datasets.ratio_split(0.7, 0.2), freq="h")


def test_time_features_and_the_channels_read_are_part_of_a_runs_identity(tmp_path):
    _dated_csv(tmp_path / "weather.csv", 300, "10min")

    def config(*flags):
        return run_config(_args(tmp_path, "--data", "Weather", *flags), "weather.csv", "f", 1)

    assert config("--freq", "h") == config(), "DLinear reads no time features"
    timesnet = ("--model", "timesnet")
    assert config(*timesnet, "--freq", "h")["data"]["time_features"] == "hour"
    assert config(*timesnet, "--freq", "h") != config(*timesnet)
    assert config("--target_only") != config()


def _csv(path, dates):
    """A CSV of the given first column and two random walks, a and OT."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"date": dates, "a": rng.normal(size=len(dates)).cumsum(),
                          "OT": rng.normal(size=len(dates)).cumsum()})
    frame.to_csv(path, index=False)
    return frame


def test_a_csv_without_dates_is_refused_with_what_was_expected_not_read_as_nanoseconds(tmp_path):
    frame = _csv(tmp_path / "x.csv", range(100)).drop(columns="date")
    frame.to_csv(tmp_path / "x.csv", index=False)  # a, OT: no date column
    with pytest.raises(ConfigError, match=r"x.csv: the first column 'a' holds numbers, not dates: the CSV format needs "
                                          r"a date column first \(date,ch1,...,target\); for a file without dates use "
                                          r".npy") as error:
        _load(_args(tmp_path, "--data", "custom", "--data_path", "x.csv"))
    assert "1970" not in str(error.value)
    _csv(tmp_path / "ids.csv", [f"sensor_{i}" for i in range(100)])
    with pytest.raises(ConfigError, match="the first column 'date' holds 'sensor_0' at row 0, not a date"):
        _load(_args(tmp_path, "--data", "custom", "--data_path", "ids.csv"))
    frame[["OT", "a"]].to_csv(tmp_path / "target_first.csv", index=False)
    with pytest.raises(ConfigError, match="--target 'OT' is the first column, which the CSV format keeps for the"):
        _load(_args(tmp_path, "--data", "custom", "--data_path", "target_first.csv"))


def test_day_first_dates_read_with_dayfirst_and_are_refused_with_a_hint_without(tmp_path):
    days = pd.date_range("2020-01-01", periods=100, freq="D")
    _csv(tmp_path / "d.csv", days.strftime("%d/%m/%Y"))
    with pytest.raises(ConfigError, match=r"the date '13/01/2020' at row 12 does not match the format %m/%d/%Y of the "
                                          r"first date '01/01/2020': for day-first dates add --dayfirst"):
        _load(_args(tmp_path, "--data", "custom", "--data_path", "d.csv"))
    assert _windows(_load(_args(tmp_path, "--data", "custom", "--data_path", "d.csv", "--dayfirst")))["test"] > 0
    table = parse_dates(read_dated_csv(str(tmp_path / "d.csv"), "OT"), "d.csv", dayfirst=True)
    assert table.dates[31] == pd.Timestamp("2020-02-01") and table.dates.equals(pd.DatetimeIndex(days))
    _dated_csv(tmp_path / "iso.csv", 30, "h")
    with pytest.raises(ConfigError, match=r"--dayfirst, but the dates start with the year \('2016-07-01 00:00:00' at "
                                          r"row 0\): drop --dayfirst"):
        parse_dates(read_dated_csv(str(tmp_path / "iso.csv"), "OT"), "iso.csv", dayfirst=True)


def test_month_first_dates_that_could_be_day_first_are_read_with_a_warning(tmp_path, caplog):
    _csv(tmp_path / "m.csv", pd.date_range("2020-01-01", periods=12, freq="MS").strftime("%m/%d/%Y"))
    with caplog.at_level(logging.WARNING):
        table = parse_dates(read_dated_csv(str(tmp_path / "m.csv"), "OT"), "m.csv")
    assert table.dates[1] == pd.Timestamp("2020-02-01")
    assert "dates such as '01/01/2020' are read month first (%m/%d/%Y) and no day is above 12; add --dayfirst" \
        in caplog.text


def test_date_format_reads_dates_pandas_does_not_infer_and_names_the_first_date_it_does_not_fit(tmp_path):
    hours = pd.date_range("2020-12-31 20:00", periods=100, freq="h")
    _csv(tmp_path / "f.csv", hours.strftime("%Y_%m_%d_%H"))
    flags = ("--data", "custom", "--data_path", "f.csv")
    with pytest.raises(ConfigError, match=r"f.csv: the first column 'date' holds '2020_12_31_20' at row 0, not a "
                                          r"date: .*; for dates in another format give --date_format"):
        _load(_args(tmp_path, *flags))
    _load(_args(tmp_path, *flags, "--date_format", "%Y_%m_%d_%H"))
    table = parse_dates(read_dated_csv(str(tmp_path / "f.csv"), "OT"), "f.csv", date_format="%Y_%m_%d_%H")
    assert table.dates.equals(pd.DatetimeIndex(hours))
    with pytest.raises(ConfigError, match=r"f.csv: the date '2021_01_01_00' at row 4 does not match --date_format "
                                          r"'%Y_12_%d_%H'"):
        _load(_args(tmp_path, *flags, "--date_format", "%Y_12_%d_%H"))
    _csv(tmp_path / "n.csv", hours.strftime("%Y%m%d%H").astype(int))  # dates written as numbers
    table = parse_dates(read_dated_csv(str(tmp_path / "n.csv"), "OT"), "n.csv", date_format="%Y%m%d%H")
    assert table.dates.equals(pd.DatetimeIndex(hours))


def test_date_flags_are_refused_where_no_dates_are_read(tmp_path):
    np.savetxt(tmp_path / "solar_AL.txt", np.random.default_rng(1).random((300, 3)), delimiter=",")
    with pytest.raises(ConfigError, match="--date_format and --dayfirst read a date column, and this file has none"):
        _load(_args(tmp_path, "--data", "Solar", "--dayfirst"))
    for flags, message in [(("--date_format", "d/m/Y"), "--date_format 'd/m/Y' is not a date format"),
                           (("--date_format", "%d/%m/%Y", "--dayfirst"), "fixes where the day is: drop --dayfirst"),
                           (("--data", "corpus", "--fill_missing", "ffill"), "--fill_missing do not apply"),
                           (("--fill_missing", "mean"), "argument --fill_missing: invalid choice: 'mean'")]:
        with pytest.raises(ConfigError, match=message):
            _args(tmp_path, *flags)


def test_filling_stays_inside_each_split_and_logs_the_count_per_column(caplog):
    nan = np.nan
    values = np.array([[nan, 1, nan, 3, nan, nan, 6, 7, nan, nan],   # NaN on both sides of each border
                       [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]], dtype=float).T
    rows = {"train": (0, 5), "val": (5, 7), "test": (7, 10)}
    with caplog.at_level(logging.INFO):
        ffilled = fill_missing(values, rows, ["a", "OT"], "x.csv", "ffill")
    assert ffilled[:, 0].tolist() == [1, 1, 1, 3, 3, 6, 6, 7, 7, 7]  # val's leading gap from val, not train's 3
    assert "x.csv: filled 6 missing values (ffill) inside each split: 'a' 6" in caplog.text
    interpolated = fill_missing(values, rows, ["a", "OT"], "x.csv", "interpolate")
    assert interpolated[:, 0].tolist() == [1, 1, 2, 3, 3, 6, 6, 7, 7, 7]  # train's last from 3, not val's 6
    assert (ffilled[:, 1] == values[:, 1]).all() and (interpolated[:, 1] == values[:, 1]).all()
    gap = {"train": (0, 5), "val": (5, 6), "test": (7, 10)}  # row 6 between val and test goes with val
    assert fill_missing(values, gap, ["a", "OT"], "x.csv", "interpolate")[5, 0] == 6
    values[7:, 0] = nan
    with pytest.raises(ConfigError, match="channel 'a' has no values in the test split, nothing to fill its gaps"):
        fill_missing(values, rows, ["a", "OT"], "x.csv", "ffill")


def test_fill_missing_is_opt_in_fits_the_scaler_on_the_training_values_present_and_keeps_inf_an_error(tmp_path,
                                                                                                      caplog):
    frame = _dated_csv(tmp_path / "gaps.csv", 200, "h")
    frame.loc[[10, 11, 150], "a"] = np.nan  # two in train, one in val (rows 140-159)
    frame.to_csv(tmp_path / "gaps.csv", index=False)
    flags = ("--data", "custom", "--data_path", "gaps.csv")
    with pytest.raises(ConfigError, match=r"3 NaN/inf values \(first in column 'a', row 10\); clean or impute the "
                                          r"data first, or fill NaN with --fill_missing ffill or interpolate"):
        _load(_args(tmp_path, *flags))
    with caplog.at_level(logging.INFO):
        bundle = _load(_args(tmp_path, *flags, "--fill_missing", "interpolate"))
    assert "filled 3 missing values (interpolate) inside each split: 'a' 3" in caplog.text
    assert np.allclose(bundle.scaler.mean, frame[["a", "b", "OT"]][:140].mean())  # pandas skips NaN
    series = bundle.datasets["train"].series.double().numpy()
    raw = bundle.scaler.transform(frame[["a", "b", "OT"]].to_numpy())
    assert np.isfinite(series).all()
    assert np.allclose(series[10:12, 0], [(2 * raw[9, 0] + raw[12, 0]) / 3, (raw[9, 0] + 2 * raw[12, 0]) / 3],
                       atol=1e-6)
    frame.loc[20, "b"] = np.inf
    frame.to_csv(tmp_path / "gaps.csv", index=False)
    with pytest.raises(ConfigError, match=r"1 infinite values \(first in column 'b', row 20\); clean the data first"):
        _load(_args(tmp_path, *flags, "--fill_missing", "ffill"))


def test_the_date_and_fill_flags_enter_a_runs_identity_only_when_set(tmp_path):
    _dated_csv(tmp_path / "weather.csv", 300, "10min")

    def config(*flags):
        return run_config(_args(tmp_path, "--data", "Weather", *flags), "weather.csv", "f", 1)

    assert sorted(config()["data"]) == ["data", "file", "fingerprint", "target"], "earlier runs keep their identity"
    for flags, added in [(("--fill_missing", "ffill"), {"fill_missing": "ffill"}),
                         (("--dayfirst",), {"dayfirst": True}),
                         (("--date_format", "%Y-%m-%d %H:%M:%S"), {"date_format": "%Y-%m-%d %H:%M:%S"})]:
        assert config(*flags)["data"] == {**config()["data"], **added}
