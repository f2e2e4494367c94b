"""TFB's rolling-forecast protocol (Qiu et al., "TFB: Towards Comprehensive and Fair Benchmarking of Time Series
Forecasting Methods", PVLDB 2024), under which DUET, PDF, Pathformer and the OpenTS leaderboard report.

Read from decisionintelligence/TFB: config/rolling_forecast_config.json and
ts_benchmark/evaluation/strategy/rolling_forecast.py (`_get_split_lens`, `_get_index`), ts_benchmark/baselines/utils.py
(`train_val_split`):
- the series is the file's first n rows, n being the `length` of FORECAST_META.csv (TFB's dataset archive): the
  whole file, but for ETT, where TFB keeps the first 20 months as the field does (ETTh: 14400 rows; the DUET
  maintainer in decisionintelligence/DUET issue 7: "the actual sequence length we use is 14,400"; ETTm: the same
  20 months, 57600 rows, by that convention, their META rows not seen here);
- its first int(0.8 n) rows train and validate (tv_ratio), the rest is the test;
- of those, the first int(tv x r) rows train and the rest validate, r = 0.75 for ETT, PEMS, Solar and the AQ data
  (6:2:2) and 0.875 otherwise (7:1:2);
- validation and test windows read the seq_len rows before their first forecast (PEMS too), and every test window
  is scored with stride 1: none is dropped (TFB's test batch of one). Its metrics average the windows' own
  MSE and MAE; every window has horizon x channels points, so that mean is the mean over all points that our
  metrics compute (docs/protocols.md).
TFB's scripts search the lookback over 96, 336 and 512 and keep the one best on validation.
"""
from data_provider.protocols import Protocol

TV_RATIO = 0.8
SIX_TWO_TWO = ("ETTh1", "ETTh2", "ETTm1", "ETTm2", "PEMS03", "PEMS04", "PEMS07", "PEMS08", "Solar", "AQShunyi", "AQWan")


def train_ratio_in_tv(dataset: str) -> float:
    return 0.75 if dataset in SIX_TWO_TWO else 0.875


# FORECAST_META's length where it is shorter than the file: ETT's first 20 months (the file holds 24)
LENGTHS = {"ETTh1": 14400, "ETTh2": 14400, "ETTm1": 57600, "ETTm2": 57600}


def split(dataset: str, n: int) -> tuple:
    n = min(n, LENGTHS.get(dataset, n))
    train_valid = int(TV_RATIO * n)
    train = int(train_valid * train_ratio_in_tv(dataset))
    if train < 1 or train_valid == train or n == train_valid:
        raise ValueError(f"needs more rows for TFB's split, found {n}")
    return {"train": (0, train), "val": (train, train_valid), "test": (train_valid, n)}, True


# revision 2 of ETT's splits: their first 20 months (revision 1 split the whole file)
PROTOCOLS = [Protocol("tfb", split, lookbacks=(96, 336, 512), drops_test_windows=False,
                      revisions=dict.fromkeys(LENGTHS, 2))]
