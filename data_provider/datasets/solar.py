"""Solar-Energy (LSTNet): solar power of 137 plants every 10 minutes, comma-separated without header or dates
(time features are zeros). TSLib's Dataset_Solar: int(0.7n) train, int(0.1n) val, the last int(0.2n) test, with
seq_len rows of lookback."""
from data_provider.datasets import Dataset, ratio_split
from data_provider.readers import read_headerless

DATASETS = [Dataset("Solar", "solar_AL.txt", read_headerless, ratio_split(0.7, 0.2, val=0.1), freq="10min",
                    target=None)]
