"""The evaluation protocols' split arithmetic, against borders computed by hand from TFB's configuration."""
import pytest

from analysis import report
from data_provider import datasets, protocols
from data_provider.factory import split_rows
from utils.errors import ConfigError


def _tfb(dataset: str, n: int) -> tuple:
    return protocols.registry()["tfb"].split(dataset, n)


def test_tfb_splits_its_length_of_the_file_at_its_ratios_as_its_rolling_forecast_config_says():
    # ETTh1's file has 17420 rows, TFB's series its first 14400: int(0.8 x 14400) = 11520 train and validate,
    # int(11520 x 0.75) = 8640 of them train; rows 14400 on are no split's
    assert _tfb("ETTh1", 17420) == ({"train": (0, 8640), "val": (8640, 11520), "test": (11520, 14400)}, True)
    assert _tfb("ETTh2", 17420) == _tfb("ETTh1", 14400)
    # ETTm1, 69680 rows, of which 57600: 46080, then 34560
    assert _tfb("ETTm1", 69680) == ({"train": (0, 34560), "val": (34560, 46080), "test": (46080, 57600)}, True)
    # a shorter file (generated data under an ETT name) is split whole: 1000 rows, 800, then 600
    assert _tfb("ETTm2", 1000) == ({"train": (0, 600), "val": (600, 800), "test": (800, 1000)}, True)
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
