"""Evaluation protocols: how a benchmark's rows split into train, validation and test, and which test windows are
scored. `--protocol` names one (default tslib). Every module in this package lists its entries in `PROTOCOLS`; add
data_provider/protocols/my_protocol.py and `--protocol my_protocol` works, with nothing else to edit.

A protocol is part of a run's identity: the same model under two protocols is two runs, each compared with the
numbers published under its own protocol (scripts/reproduce/paper_results.csv, column `protocol`).
"""
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from utils.registry import collect

DEFAULT = "tslib"


@dataclass(frozen=True)
class Protocol:
    name: str                                      # the --protocol value
    # (dataset name, rows) -> {split: (first row, end row)} of the rows each split forecasts, and whether val and
    # test windows read the seq_len rows before their first (None: the dataset's own split and lookback)
    split: Callable[[str, int], tuple] | None = None
    lookbacks: tuple = ()                          # the lookbacks its papers search on validation (analysis/report.py)
    drops_test_windows: bool = True                # False: --test_drop_last is refused, every window is scored
    # dataset -> revision (default 1), raised when a change to the protocol changes that dataset's split; enters run
    # identities from 2 on (exp/identity.py), so that runs under the earlier split are never taken for runs under the
    # new one, and runs on the datasets it left alone keep theirs
    revisions: dict = field(default_factory=dict)

    def revision(self, dataset: str) -> int:
        return self.revisions.get(dataset, 1)


class ProtocolFileError(ValueError):
    """A file in data_provider/protocols/ that cannot serve: the message names it and what is wrong."""


@functools.cache
def registry() -> dict:
    """name -> Protocol, from every module of the package (imported on first use)."""
    return collect(__name__, __path__, "PROTOCOLS", Protocol, ProtocolFileError)
