"""TSLib's Dataset_Custom: 70% train, the last 20% test, val between; val and test windows read seq_len rows
before their split. The long-term-forecasting benchmarks (Autoformer's collection) use it with these files."""
from data_provider.datasets import Dataset, ratio_split
from data_provider.readers import read_by_extension, read_dated_csv

_SPLIT = ratio_split(0.7, 0.2)


def _benchmark(name: str, file: str, freq: str) -> Dataset:
    return Dataset(name, file, read_dated_csv, _SPLIT, freq=freq, family="custom")


DATASETS = [
    Dataset("custom", None, read_by_extension, _SPLIT),  # any file: a CSV with a date column first, .npy, .npz, .txt
    _benchmark("Weather", "weather.csv", "10min"),          # 21 meteorological indicators
    _benchmark("ECL", "electricity.csv", "1h"),             # electricity consumption of 321 clients
    _benchmark("Traffic", "traffic.csv", "1h"),             # occupancy of 862 San Francisco freeway sensors
    _benchmark("Exchange", "exchange_rate.csv", "1D"),      # daily exchange rates of 8 countries
    _benchmark("ILI", "national_illness.csv", "7D"),        # weekly influenza-like illness ratios, 7 channels
]
