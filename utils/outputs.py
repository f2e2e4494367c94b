"""Everything a run writes under results_dir, and sends to experiment trackers (utils/trackers.py). Built once: the
main rank gets a writer, other ranks a no-op."""
import csv
import fcntl
import json
import os
import shutil
import time

import numpy as np

from utils.files import guarded, write_atomic, write_csv
from utils.metrics import reported_names
from utils.provenance import provenance
from utils.trackers import DEFAULT_PROJECT, Trackers

CURVES = ("train_loss", "vali_loss", "test_loss", "lr")
# per metric, one float32 per test window (row i: the i-th window of the test split), for comparing runs window
# by window (analysis.compare); written before metrics.json, which marks the test as finished
WINDOW_ERRORS = "window_errors.npz"


def results_columns() -> tuple:
    """results.csv's columns: the run and test, every registered metric (on the scaled data, then on the original
    scale), then how it was trained."""
    return ("time", "setting", "test", "config_id", "seed", "model", "dataset", "features", "seq_len",
            "output_token_len", "test_pred_len", *reported_names(), "world_size", "global_batch_size", "learning_rate",
            "effective_lr", "best_epoch", "epochs_run", "n_test_windows")


class RunOutputs:
    """results_root/<run>/: history.csv and tensorboard/ of the run's training, <test>/metrics.json and plots of
    each of its tests; and one row per (run, test) in results_root/results.csv. The trackers get the same rows and
    metrics."""

    def __init__(self, results_root: str, setting: str, trackers: Trackers):
        self.root, self.setting = results_root, setting
        self.dir = os.path.join(results_root, setting)
        self._tb = None
        self._history = []
        self._trackers = trackers

    def start_training(self, history: list) -> None:
        """A fresh event stream holding exactly this run's epochs so far (a resumed run's restored ones): an
        interrupted attempt's events are dropped, so TensorBoard never shows an epoch twice. The trackers get the
        restored rows they lack."""
        self.close()
        shutil.rmtree(os.path.join(self.dir, "tensorboard"), ignore_errors=True)
        self._history = []
        for row in history:
            self._write_row(row)
        self._trackers.start(history)

    def epoch(self, row: dict) -> None:
        self._write_row(row)
        self._trackers.epoch(row)

    def _write_row(self, row: dict) -> None:
        """One history.csv row per epoch (rewritten whole, so the file is always complete) + TensorBoard."""
        self._history.append(dict(row))
        write_csv(os.path.join(self.dir, "history.csv"), list(row), self._history)
        events = os.path.join(self.dir, "tensorboard")
        if self._tb is None:
            from torch.utils.tensorboard import (
                SummaryWriter,  # only training runs load TensorBoard
            )
            self._tb = guarded(events, SummaryWriter, log_dir=events)
        x = row.get("step", row["epoch"])  # a run by steps: its rows are steps apart, not epochs
        for key in CURVES + tuple(k for k in row if k.startswith("aux_")):  # a model's own loss terms too
            guarded(events, self._tb.add_scalar, key, row[key], x)
        guarded(events, self._tb.flush)

    def loss_curves(self) -> None:
        from utils.visualize import (
            plot_losses,  # matplotlib is loaded only by runs that plot
        )
        path = os.path.join(self.dir, "loss_curves.png")
        if self._history:
            write_atomic(path, lambda f: plot_losses(f, self._history))

    def test(self, test: str, metrics: dict, window_errors: dict, forecasts: list = ()) -> str:
        """metrics.json (with provenance), window_errors.npz and plots of one test; its row of results.csv.
        Returns the test's folder."""
        folder = os.path.join(self.dir, test)
        write_atomic(os.path.join(folder, WINDOW_ERRORS), lambda f: np.savez(f, **window_errors))
        text = json.dumps({**metrics, "provenance": provenance()}, indent=2) + "\n"
        write_atomic(os.path.join(folder, "metrics.json"), lambda f: f.write(text.encode()))
        if forecasts:
            from utils.visualize import plot_forecast
            for i, (title, history, truth, forecast, panels, bands) in enumerate(forecasts):
                path = os.path.join(folder, f"forecast_{i}.png")
                write_atomic(path, lambda f: plot_forecast(f, history, truth, forecast, panels, title, bands))
        _replace_result_row(os.path.join(self.root, "results.csv"),
                            {**{k: metrics.get(k) for k in results_columns()}, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
                             "test": test})
        self._trackers.test(test, metrics)  # the last output of a run: its tracker runs end here
        return folder

    def close(self) -> None:
        if self._tb is not None:
            guarded(os.path.join(self.dir, "tensorboard"), self._tb.close)
            self._tb = None


class NullOutputs:
    """Non-main ranks: same interface, writes nothing."""

    def __init__(self, results_root: str, setting: str):
        self.dir = os.path.join(results_root, setting)

    def start_training(self, history: list) -> None:
        pass

    def epoch(self, row: dict) -> None:
        pass

    def loss_curves(self) -> None:
        pass

    def test(self, test: str, metrics: dict, window_errors: dict, forecasts: list = ()) -> str:
        return os.path.join(self.dir, test)

    def close(self) -> None:
        pass


def make_outputs(is_main: bool, results_root: str, identity, trackers=(), tracker_project: str = DEFAULT_PROJECT):
    """identity: the run's (exp.identity.RunIdentity); trackers: the names of --tracker."""
    if not is_main:
        return NullOutputs(results_root, identity.setting)
    folder = os.path.join(results_root, identity.setting)
    return RunOutputs(results_root, identity.setting, Trackers(trackers, tracker_project, identity, folder))


def _replace_result_row(path: str, row: dict) -> None:
    """Add a (run, test) row to results.csv, replacing that pair's earlier row: a re-test or a restarted job
    never leaves two rows for one result. A lock on the folder serialises runs sharing results_dir."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    lock = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = []
        if os.path.isfile(path):
            with open(path, newline="") as f:
                rows = [r for r in csv.DictReader(f) if (r.get("setting"), r.get("test")) != (row["setting"], row["test"])]
        write_csv(path, results_columns(), [*rows, row])
    finally:
        os.close(lock)  # releases the lock
