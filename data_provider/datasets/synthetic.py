"""The default: a generated hourly series (data_provider/synthetic.py), written under --root_path if absent."""
from data_provider import synthetic
from data_provider.datasets import Dataset, ratio_split
from data_provider.readers import read_dated_csv

DATASETS = [Dataset("synthetic", "synthetic.csv", read_dated_csv, ratio_split(0.7, 0.2), freq="1h",
                    generate=lambda: synthetic.csv_text(synthetic.generate()))]
