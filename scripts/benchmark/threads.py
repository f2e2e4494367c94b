"""Epoch time by CPU thread count: the default run.py chooses (utils/threads.py) against fixed counts, on an idle
machine and beside a competing busy process.

    python -m scripts.benchmark.threads [--models dlinear,patchtst,itransformer] [--threads 1,2] [--repeat 3]
                                        [--data_root DIR]

Each model runs one epoch of its ETTh1 paper setting at horizon 96 (scripts/make_scripts.py), in a process of
its own with no OMP_NUM_THREADS set: once with run.py's default and once per --threads count (default: 1 and
every core this process may use). "busy" runs the same beside one other process spinning on a core, as a
neighbour's job on a shared machine does. ETTh1 is generated in its shape (17420 hourly rows, 7 channels)
unless --data_root holds ETT-small/ETTh1.csv. Printed: the median epoch seconds (training and evaluation, from
history.csv) of --repeat runs per cell, the threads the default chose, and how far it is from the best count.
Numbers only; nothing is asserted.
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import contextmanager

from data_provider import synthetic
from scripts.make_scripts import MODELS as SCRIPTED, run_flags
from utils import cli, threads
from utils.errors import ConfigError, TrainingError

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ("dlinear", "patchtst", "itransformer")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@contextmanager
def neighbour(busy: bool):
    """A process spinning on one core for the duration (none when not busy)."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        yield
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()


def epoch_seconds(model: str, root: str, folder: str, count: int | None) -> tuple:
    """(seconds of the epoch, the threads the run used) of one run.py process."""
    flags = run_flags(model, "ETTh1", 96)
    flags[flags.index("--root_path") + 1] = root
    flags += ["--train_epochs", "1", "--device", "cpu", "--checkpoints", f"{folder}/ckpt", "--results_dir",
              f"{folder}/results"] + ([] if count is None else ["--threads", str(count)])
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    proc = subprocess.run([sys.executable, "run.py", *flags], cwd=HERE, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise TrainingError(f"{cli.error_line(proc.stderr, 'it failed')} (model {model})")
    (history,) = [os.path.join(d, "history.csv") for d, _, files in os.walk(f"{folder}/results")
                  if "history.csv" in files]
    with open(history) as f:
        row = next(csv.DictReader(f))
    used = next(int(line.split("intra-op threads: ")[1].split()[0]) for line in proc.stderr.splitlines()
                if "intra-op threads: " in line)
    return float(row["train_seconds"]) + float(row["eval_seconds"]), used


def measure(models: list, counts: list, repeat: int, root: str) -> list:
    """One row per (model, load): the median seconds of the default and of each count, the default's choice."""
    rows = []
    for model in models:
        for busy in (False, True):
            times, chosen = {"default": [], **{c: [] for c in counts}}, set()
            with neighbour(busy):
                for _ in range(repeat):  # the settings alternate, so a drift of the machine touches each alike
                    for setting in times:
                        with tempfile.TemporaryDirectory() as folder:
                            seconds, used = epoch_seconds(model, root, folder, None if setting == "default" else setting)
                        times[setting].append(seconds)
                        if setting == "default":
                            chosen.add(used)
            rows.append({"model": model, "load": "busy neighbour" if busy else "idle", "chosen": sorted(chosen),
                         **{k: statistics.median(v) for k, v in times.items()}})
    return rows


def table(rows: list, counts: list) -> str:
    head = ["model", "machine", "default (threads)", *[f"{c} thread{'s' * (c > 1)}" for c in counts], "default vs best"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        best = min(r[c] for c in counts)
        lines.append(f"| {r['model']} | {r['load']} | {r['default']:.2f} s ({'/'.join(map(str, r['chosen']))}) | "
                     + " | ".join(f"{r[c]:.2f} s" for c in counts) + f" | {100 * (r['default'] / best - 1):+.0f}% |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(MODELS), help="models with an ETTh1 paper setting, comma-separated")
    p.add_argument("--threads", type=cli.int_list, default=None,
                   help="thread counts to compare with the default (default: 1 and this process's cores)")
    p.add_argument("--repeat", type=cli.at_least(1), default=3, help="runs per cell; the median is shown")
    p.add_argument("--data_root", default=None, help="a folder with ETT-small/ETTh1.csv (default: generated)")
    a = p.parse_args(argv)
    counts = a.threads or sorted({1, threads.available_cores()})
    models = a.models.split(",")
    unknown = [m for m in models if m not in SCRIPTED]
    if unknown:
        raise ConfigError(f"--models: {', '.join(unknown)} have no ETTh1 paper setting")
    with tempfile.TemporaryDirectory() as data:
        if a.data_root:
            root = os.path.join(a.data_root, "ETT-small")
            if not os.path.isfile(os.path.join(root, "ETTh1.csv")):
                raise ConfigError(f"--data_root {a.data_root}: no ETT-small/ETTh1.csv there")
        else:
            root = data
            frame = synthetic.generate(length=17420, n_covariates=6, seed=0)
            synthetic.write_csv(frame, os.path.join(root, "ETTh1.csv"))
        rows = measure(models, counts, a.repeat, root)
    print(f"epoch seconds (median of {a.repeat}), ETTh1 shape, {threads.describe_cores()}")
    print(table(rows, counts))


if __name__ == "__main__":
    cli.run(main)
