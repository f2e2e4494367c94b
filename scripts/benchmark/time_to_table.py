"""Time to a paper table: a model's paper-setting table (horizons x seeds) from the command to the printed report.

    python -m scripts.benchmark.time_to_table --data_root ../shared/datasets [--model dlinear] [--dataset ETTh1]
                                               [--seeds 2021,2022,2023] [--repeat 2] [--tslib DIR]

Times, from a fresh results folder each time, in alternation:
  loop   the model's script once per seed (scripts/long_term_forecast/<model>_<dataset>.sh: one run.py
         process per horizon), then `python -m analysis.report`: what a script-driven workflow does;
  sweep  `python -m scripts.sweep --paper <model> --datasets <dataset> --seed ...` (its workers, then the
         report it prints);
  tslib  with --tslib DIR (a Time-Series-Library checkout): its run.py once per horizon with the same paper
         setting and `--itr <number of seeds>` (TSLib fixes the seed in run.py and repeats the run in one
         process), its other flags at their defaults; models whose paper setting uses only flags TSLib shares.
Wall seconds of each, their ratio per repetition, and the sweep's per-cell overhead (from its cells.csv).
Numbers only; nothing is asserted.
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time

from analysis.report import DEFAULT_SETTINGS, load_settings
from scripts.make_scripts import DATASETS
from utils import cli
from utils.errors import ConfigError, TrainingError

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def timed(cmd: list, env: dict, cwd: str = HERE) -> float:
    """Wall seconds of a command; its failure ends the benchmark with the error line it printed."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        raise TrainingError(f"{cli.error_line(proc.stderr, 'it failed')} (in: {' '.join(cmd)})")
    return time.perf_counter() - start


def script_of(model: str, dataset: str) -> str:
    return f"scripts/long_term_forecast/{model}_{dataset}.sh"


def loop(model: str, dataset: str, seeds: list, data_root: str, folder: str) -> float:
    env = {**os.environ, "DATA_ROOT": data_root, "RESULTS": f"{folder}/results", "CHECKPOINTS": f"{folder}/ckpt"}
    runs = " && ".join(f"bash {script_of(model, dataset)} --seed {s}" for s in seeds)
    return timed(["bash", "-c", f"{runs} && {sys.executable} -m analysis.report {folder}/results"], env)


TSLIB_MODELS = {"dlinear": "DLinear"}  # models whose paper setting TSLib's run.py flags express
TSLIB_FLAGS = {"task": ("seq_len",), "training": ("batch_size", "learning_rate", "train_epochs", "patience", "lradj")}


def tslib_commands(model: str, dataset: str, runs: int, data_root: str, python: str = sys.executable) -> list:
    """TSLib's run.py per horizon of the model's paper setting on the dataset (scripts/reproduce/paper_settings.json)."""
    if model not in TSLIB_MODELS:
        raise ConfigError(f"--tslib: no TSLib translation of {model}'s paper setting (have: {', '.join(TSLIB_MODELS)})")
    settings = {h: cfg for (m, d, h, protocol), cfg in sorted(load_settings(DEFAULT_SETTINGS).items())
                if (m, d, protocol) == (model, dataset, "tslib")}
    if not settings:
        raise ConfigError(f"--tslib: {model} has no paper setting on {dataset}")
    folder = os.path.join(data_root, DATASETS[dataset][0])
    data = next(iter(settings.values()))["data"]
    with open(os.path.join(folder, data["file"])) as f:
        channels = len(f.readline().split(",")) - 1
    commands = []
    for horizon, cfg in settings.items():
        flags = {k: cfg[group][k] for group, keys in TSLIB_FLAGS.items() for k in keys}
        flags.update(task_name="long_term_forecast", is_training=1, model_id=f"{dataset}_{horizon}",
                     model=TSLIB_MODELS[model], data=data["data"] if dataset.startswith("ETT") else "custom",
                     root_path=folder + "/", data_path=data["file"], features="M", target=data["target"],
                     pred_len=horizon, enc_in=channels, dec_in=channels, c_out=channels, itr=runs)
        commands.append([python, "-u", "run.py"] + [f"--{k}={v}" for k, v in flags.items()] + ["--no_use_gpu"])
    return commands


def tslib(model: str, dataset: str, seeds: list, data_root: str, tslib_dir: str, python: str) -> float:
    """TSLib writes checkpoints and results under its working directory: a fresh copy of the checkout per timing."""
    with tempfile.TemporaryDirectory() as work:
        shutil.copytree(tslib_dir, work, dirs_exist_ok=True)
        return sum(timed(cmd, dict(os.environ), work)
                   for cmd in tslib_commands(model, dataset, len(seeds), data_root, python))


def sweep(model: str, dataset: str, seeds: list, data_root: str, folder: str) -> tuple:
    cmd = [sys.executable, "-m", "scripts.sweep", "--quiet", "--paper", model, "--datasets", dataset,
           "--data_root", data_root, "--seed", ",".join(seeds), "--results_dir", f"{folder}/results",
           "--checkpoints", f"{folder}/ckpt"]
    seconds = timed(cmd, dict(os.environ))
    with open(f"{folder}/results/sweep/cells.csv") as f:
        cells = list(csv.DictReader(f))
    overhead = [float(c["seconds"]) - float(c["epoch_seconds"]) for c in cells if c["outcome"] == "done"]
    return seconds, overhead


def main(argv=None) -> None:
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data_root", required=True, type=cli.existing_folder)
    p.add_argument("--model", default="dlinear")
    p.add_argument("--dataset", default="ETTh1")
    p.add_argument("--seeds", type=cli.int_list, default="2021,2022,2023")
    p.add_argument("--repeat", type=cli.at_least(1), default=1, help="alternating repetitions")
    p.add_argument("--tslib", type=cli.existing_folder,
                   help="a Time-Series-Library checkout: also time its run.py per horizon")
    p.add_argument("--tslib_python", default=sys.executable, help="the Python with TSLib's requirements")
    a = p.parse_args(argv)
    if not os.path.isfile(os.path.join(HERE, script_of(a.model, a.dataset))):
        raise ConfigError(f"--model {a.model} --dataset {a.dataset}: no paper-setting script "
                          f"{script_of(a.model, a.dataset)} (scripts/make_scripts.py writes them)")
    seeds, data_root = [str(s) for s in a.seeds], os.path.abspath(a.data_root)
    print(f"{a.model} {a.dataset}, seeds {a.seeds}, {os.cpu_count()} cores")
    for r in range(a.repeat):
        with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as other:
            looped = loop(a.model, a.dataset, seeds, data_root, one)
            swept, overhead = sweep(a.model, a.dataset, seeds, data_root, other)
        if a.tslib:
            tslibbed = tslib(a.model, a.dataset, seeds, data_root, os.path.abspath(a.tslib), a.tslib_python)
            print(f"repetition {r + 1}: TSLib run.py per horizon (--itr {len(seeds)}) {tslibbed:.1f} s | TSLib / "
                  f"sweep {tslibbed / swept:.2f}")
        print(f"repetition {r + 1}: script loop {looped:.1f} s | sweep {swept:.1f} s | loop / sweep "
              f"{looped / swept:.2f} | sweep cells beyond their epochs: mean {sum(overhead) / len(overhead):.2f} s, "
              f"the first of each worker included (min {min(overhead):.2f} s)")


if __name__ == "__main__":
    cli.run(main)
