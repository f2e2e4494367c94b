"""PEMS traffic flow (SCINet's npz files): the first feature of every sensor every 5 minutes. TSLib's
Dataset_PEMS: contiguous 60/20/20 blocks, no lookback into the previous block, missing values forward- then
back-filled within each block. `--data PEMS --data_path FILE` reads any file of this layout."""
from data_provider.datasets import Dataset, block_split
from data_provider.readers import read_npz_first_feature


def _pems(name: str, file: str | None, family: str | None = "PEMS") -> Dataset:
    return Dataset(name, file, read_npz_first_feature, block_split(0.6, 0.2), lookback=False, freq="5min",
                   target=None, fill_missing="ffill", family=family)


# PeMS districts 3, 4, 7 and 8: 358, 307, 883 and 170 sensors
DATASETS = [_pems("PEMS", None, family=None), *(_pems(f"PEMS{k}", f"PEMS{k}.npz") for k in ("03", "04", "07", "08"))]
