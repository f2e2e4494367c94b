"""ETT (Zhou et al., Informer, AAAI 2021): electricity transformer temperature, 7 channels, hourly (ETTh) or
every 15 minutes (ETTm); 12/4/4 months of train/val/test, as Informer, Autoformer and TSLib."""
from data_provider.datasets import Dataset, fixed_split
from data_provider.readers import read_dated_csv


def _ett(name: str, rows_per_month: int, freq: str) -> Dataset:
    m = rows_per_month
    return Dataset(name, f"{name}.csv", read_dated_csv, fixed_split(12 * m, 16 * m, 20 * m), freq=freq)


DATASETS = [_ett("ETTh1", 30 * 24, "1h"), _ett("ETTh2", 30 * 24, "1h"),
            _ett("ETTm1", 30 * 24 * 4, "15min"), _ett("ETTm2", 30 * 24 * 4, "15min")]
