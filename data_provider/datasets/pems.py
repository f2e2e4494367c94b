"""PEMS traffic flow (SCINet's npz files): the first feature of every sensor every 5 minutes. TSLib's
Dataset_PEMS: contiguous 60/20/20 blocks, no lookback into the previous block, missing values forward- then
back-filled within each block."""
from data_provider.datasets import Dataset, block_split
from data_provider.readers import read_npz_first_feature

_SPLIT = block_split(0.6, 0.2)


def _pems(name: str, file: str | None, help: str, family: str | None = "PEMS") -> Dataset:
    return Dataset(name, file, read_npz_first_feature, _SPLIT, lookback=False, freq="5min", target=None,
                   fill_missing=True, family=family, help=help)


DATASETS = [
    _pems("PEMS", None, "any PEMS-style .npz (data: time x node x feature): --data_path names it", family=None),
    *(_pems(f"PEMS{k}", f"PEMS{k}.npz", f"PeMS district {int(k)} traffic flow, {n} sensors")
      for k, n in (("03", 358), ("04", 307), ("07", 883), ("08", 170))),
]
