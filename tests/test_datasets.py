"""The dataset registry: every benchmark is one entry whose file, format and split are the papers' code's
(TSLib's Dataset_ETT_*, Dataset_Custom, Dataset_Solar and Dataset_PEMS), read here from tiny generated files in
the same formats."""
import logging

import numpy as np
import pandas as pd
import pytest
import torch

from data_provider import datasets
from data_provider.factory import build_data
from exp.flags import parse_args, validate
from exp.identity import run_config
from utils.errors import ConfigError

SEQ, PRED = 12, 4


def _args(root, *flags):
    args = parse_args(["--root_path", str(root), "--model", "dlinear", "--nonautoregressive", "--seq_len", str(SEQ),
                       "--output_token_len", str(PRED), *flags])
    validate(args)
    return args


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
