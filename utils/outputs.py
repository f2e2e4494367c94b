"""Everything a run writes under results_dir. Built once: the main rank gets a writer, others a no-op."""
import csv
import json
import os
import time

from torch.utils.tensorboard import SummaryWriter

RESULTS_COLUMNS = ("time", "setting", "model", "dataset", "features", "seq_len", "output_token_len", "test_pred_len",
                   "mse", "mae", "rmse", "mape", "mspe", "world_size", "global_batch_size", "learning_rate",
                   "effective_lr", "best_epoch", "epochs_run", "n_test_windows")


class RunOutputs:
    def __init__(self, results_dir: str, run_name: str, history: list = ()):
        self.results_dir = results_dir
        self.dir = os.path.join(results_dir, run_name)
        os.makedirs(self.dir, exist_ok=True)
        self._tb = None  # created on first use, so a test-only run leaves no empty event file
        self._history_rows = list(history)  # a resumed run continues its history.csv

    def epoch(self, row: dict) -> None:
        """One history.csv row per epoch (rewritten whole, so the file is always complete) + TensorBoard."""
        self._history_rows.append(dict(row))
        _write_csv(os.path.join(self.dir, "history.csv"), list(row), self._history_rows)
        if self._tb is None:
            self._tb = SummaryWriter(log_dir=os.path.join(self.dir, "tensorboard"))
        for key in ("train_loss", "vali_loss", "test_loss", "lr"):
            self._tb.add_scalar(key, row[key], row["epoch"])
        self._tb.flush()

    def metrics(self, metrics: dict) -> None:
        _write_text(os.path.join(self.dir, "metrics.json"), json.dumps(metrics, indent=2) + "\n")
        row = {k: metrics.get(k) for k in RESULTS_COLUMNS}
        row["time"] = time.strftime("%Y-%m-%d %H:%M:%S")
        path = os.path.join(self.results_dir, "results.csv")
        new = not os.path.isfile(path)
        with open(path, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=RESULTS_COLUMNS)
            if new:
                writer.writeheader()
            writer.writerow(row)

    def loss_curves(self) -> None:
        from utils.visualize import plot_losses  # matplotlib is loaded only by runs that plot
        if self._history_rows:
            plot_losses(os.path.join(self.dir, "loss_curves.png"), self._history_rows)

    def forecasts(self, windows: list) -> None:
        """windows: (title, history, truth, forecast, [(panel name, channel)]) with (time, channel) arrays."""
        from utils.visualize import plot_forecast
        for i, (title, history, truth, forecast, panels) in enumerate(windows):
            plot_forecast(os.path.join(self.dir, f"forecast_{i}.png"), history, truth, forecast, panels, title)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


class NullOutputs:
    """Non-main ranks: same interface, writes nothing."""

    def epoch(self, row: dict) -> None:
        pass

    def metrics(self, metrics: dict) -> None:
        pass

    def loss_curves(self) -> None:
        pass

    def forecasts(self, windows: list) -> None:
        pass

    def close(self) -> None:
        pass


def make_outputs(is_main: bool, results_dir: str, run_name: str, history: list = ()):
    return RunOutputs(results_dir, run_name, history) if is_main else NullOutputs()


def _write_text(path: str, text: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _write_csv(path: str, fields: list, rows: list) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)
