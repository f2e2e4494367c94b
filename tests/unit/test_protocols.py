"""The evaluation protocols' split arithmetic, against borders computed by hand from TFB's configuration."""
import pytest

from analysis import report
from data_provider import datasets, protocols
from data_provider.factory import split_rows
from utils.errors import ConfigError


def _tfb(dataset: str, n: int) -> tuple:
    return protocols.registry()["tfb"].split(dataset, n)


def test_tfb_splits_the_whole_file_at_its_ratios_as_its_rolling_forecast_config_says():
    # ETTh1, 17420 rows: int(0.8 x 17420) = 13936 train and validate, int(13936 x 0.75) = 10452 of them train
    assert _tfb("ETTh1", 17420) == ({"train": (0, 10452), "val": (10452, 13936), "test": (13936, 17420)}, True)
    # ETTm1, 69680 rows: 55744, then 41808
    assert _tfb("ETTm1", 69680) == ({"train": (0, 41808), "val": (41808, 55744), "test": (55744, 69680)}, True)
    # Weather, 52696 rows, the default 0.875: int(42156.8) = 42156, int(36886.5) = 36886
    assert _tfb("Weather", 52696) == ({"train": (0, 36886), "val": (36886, 42156), "test": (42156, 52696)}, True)
    # ILI, 966 rows: 772, then int(675.5) = 675
    assert _tfb("ILI", 966) == ({"train": (0, 675), "val": (675, 772), "test": (772, 966)}, True)
    # PEMS08, 17856 rows, 6:2:2; its windows look back under TFB, unlike TSLib's PEMS
    assert _tfb("PEMS08", 17856) == ({"train": (0, 10713), "val": (10713, 14284), "test": (14284, 17856)}, True)


def test_tslib_keeps_each_datasets_own_split_and_lookback():
    ett, pems = datasets.registry()["ETTh1"], datasets.registry()["PEMS08"]
    assert split_rows(ett, 17420, "ETTh1.csv") == \
        ({"train": (0, 8640), "val": (8640, 11520), "test": (11520, 14400)}, True)
    assert split_rows(pems, 17856, "PEMS08.npz") == (pems.split(17856), False)
    assert split_rows(ett, 17420, "ETTh1.csv", "tfb") == _tfb("ETTh1", 17420)


def test_a_file_too_short_for_tfbs_split_is_one_line():
    with pytest.raises(ConfigError, match="t.csv: ETTh1 needs more rows for TFB's split, found 1"):
        split_rows(datasets.registry()["ETTh1"], 1, "t.csv", "tfb")


def test_the_report_knows_every_registered_protocol_and_those_that_search_the_lookback():
    assert set(report.LONG_TERM_PROTOCOLS) == set(protocols.registry())
    assert set(report.SEARCHES_LOOKBACK) == {name for name, p in protocols.registry().items() if p.lookbacks}
