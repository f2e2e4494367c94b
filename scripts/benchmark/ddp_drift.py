"""How far DDP, FSDP and gradient accumulation drift from one process on a real-sized model: the relative
differences of every epoch's validation loss and of the test metrics from one process at the global batch.

    python -m scripts.benchmark.ddp_drift [--model itransformer] [--epochs 2] [--data_root DIR]

The model's ETTh1 paper setting at horizon 96 (scripts/make_scripts.py) with dropout off (with dropout, ranks
draw other masks and runs are equal in distribution only), in four runs of one global batch 2B:
  one process    batch 2B, the learning rate x2 (what linear scaling gives two ranks)
  ddp            torchrun, 2 ranks of batch B
  fsdp           the same, --fsdp
  accumulation   one process, batch B, --accum_steps 2, the learning rate x2
The tests hold the exact algebra on tiny models (rel 1e-6, docs/distributed.md); this measures what float
rounding, amplified by Adam where gradients are near zero, makes of it on a model of the papers' size. ETTh1 is
generated in its shape unless --data_root holds ETT-small/ETTh1.csv. Numbers only; nothing is asserted.
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

from data_provider import synthetic
from scripts.make_scripts import MODELS as SCRIPTED, run_flags
from utils import cli
from utils.errors import ConfigError, TrainingError

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
METRICS = ("mse", "mae")


def _run(model: str, root: str, folder: str, epochs: int, how: str) -> dict:
    """metrics.json of one run: its history and test metrics."""
    flags = run_flags(model, "ETTh1", 96)
    flags[flags.index("--root_path") + 1] = root
    batch = int(flags[flags.index("--batch_size") + 1]) if "--batch_size" in flags else 32
    lr = float(flags[flags.index("--learning_rate") + 1]) if "--learning_rate" in flags else 1e-4
    flags = [f for i, f in enumerate(flags) if f not in ("--batch_size", "--learning_rate")
             and flags[i - 1] not in ("--batch_size", "--learning_rate")]
    flags += ["--train_epochs", str(epochs), "--patience", str(epochs), "--dropout", "0", "--device", "cpu",
              "--checkpoints", f"{folder}/{how}/ckpt", "--results_dir", f"{folder}/{how}/results"]
    one, two = ["--batch_size", str(2 * batch), "--learning_rate", str(2 * lr)], \
        ["--batch_size", str(batch), "--learning_rate", str(lr)]
    command = {
        "one process": [sys.executable, "run.py", *flags, *one],
        "ddp": [sys.executable, "-m", "scripts.torchrun", "--standalone", "--nproc_per_node=2", "run.py", "--ddp",
                *flags, *two],
        "fsdp": [sys.executable, "-m", "scripts.torchrun", "--standalone", "--nproc_per_node=2", "run.py", "--ddp",
                 "--fsdp", *flags, *two],
        "accumulation": [sys.executable, "run.py", *flags, "--batch_size", str(batch), "--learning_rate", str(2 * lr),
                         "--accum_steps", "2"]}[how]
    proc = subprocess.run(command, cwd=HERE, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True,
                          text=True)
    if proc.returncode:
        raise TrainingError(f"{cli.error_line(proc.stderr, 'it failed')} ({how})")
    (path,) = [os.path.join(d, "metrics.json") for d, _, files in os.walk(f"{folder}/{how}/results")
               if "metrics.json" in files]
    with open(path) as f:
        metrics = json.load(f)
    with open(os.path.join(os.path.dirname(os.path.dirname(path)), "history.csv")) as f:
        metrics["vali"] = [float(row["vali_loss"]) for row in csv.DictReader(f)]
    return metrics


def main(argv=None) -> None:
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="itransformer", help="a model with an ETTh1 paper setting")
    p.add_argument("--epochs", type=cli.at_least(1), default=2)
    p.add_argument("--data_root", default=None, help="a folder with ETT-small/ETTh1.csv (default: generated)")
    a = p.parse_args(argv)
    if a.model not in SCRIPTED:
        raise ConfigError(f"--model {a.model}: no ETTh1 paper setting (have: {', '.join(SCRIPTED)})")
    with tempfile.TemporaryDirectory() as folder:
        root = os.path.join(a.data_root, "ETT-small") if a.data_root else folder
        if a.data_root and not os.path.isfile(os.path.join(root, "ETTh1.csv")):
            raise ConfigError(f"--data_root {a.data_root}: no ETT-small/ETTh1.csv there")
        if not a.data_root:
            synthetic.write_csv(synthetic.generate(length=17420, n_covariates=6, seed=0), os.path.join(root, "ETTh1.csv"))
        runs = {how: _run(a.model, root, folder, a.epochs, how) for how in ("one process", "ddp", "fsdp", "accumulation")}
    base = runs["one process"]
    print(f"{a.model}, ETTh1{' (generated)' if not a.data_root else ''}, horizon 96, {a.epochs} epochs, dropout 0: "
          f"relative difference from one process at the global batch")
    print("| run | " + " | ".join(f"vali epoch {i + 1}" for i in range(len(base["vali"]))) + " | test mse | test mae |")
    print("|---|" + "---|" * (len(base["vali"]) + 2))
    for how, r in runs.items():
        if how == "one process":
            continue
        cells = [abs(v / b - 1) for v, b in zip(r["vali"], base["vali"], strict=True)] + \
            [abs(r[m] / base[m] - 1) for m in METRICS]
        print(f"| {how} | " + " | ".join(f"{c:.1e}" for c in cells) + " |")


if __name__ == "__main__":
    cli.run(main)
