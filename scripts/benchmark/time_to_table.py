"""Time to a paper table: a model's paper-setting table (horizons x seeds) from the command to the printed report.

    python scripts/benchmark/time_to_table.py --data_root ../shared/datasets [--model dlinear] [--dataset ETTh1]
                                              [--seeds 2021,2022,2023] [--repeat 2]

Times, from a fresh results folder each time, in alternation:
  loop   the model's script once per seed (scripts/long_term_forecast/<model>_<dataset>.sh: one run.py
         process per horizon), then `python -m utils.report`: what a script-driven workflow does;
  sweep  `python -m scripts.sweep --paper <model> --datasets <dataset> --seed ...` (its workers, then the
         report it prints).
Wall seconds of each, their ratio per repetition, and the sweep's per-cell overhead (from its cells.csv).
Numbers only; nothing is asserted.
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def timed(cmd: list, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=HERE, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def loop(model: str, dataset: str, seeds: list, data_root: str, folder: str) -> float:
    env = {**os.environ, "DATA_ROOT": data_root, "RESULTS": f"{folder}/results", "CHECKPOINTS": f"{folder}/ckpt"}
    script = f"scripts/long_term_forecast/{model}_{dataset}.sh"
    body = " && ".join(f"bash {script} --seed {s}" for s in seeds) + f" && {sys.executable} -m utils.report " \
        f"{folder}/results"
    return timed(["bash", "-c", body], env)


def sweep(model: str, dataset: str, seeds: list, data_root: str, folder: str) -> tuple:
    cmd = [sys.executable, "-m", "scripts.sweep", "--quiet", "--paper", model, "--datasets", dataset,
           "--data_root", data_root, "--seed", ",".join(seeds), "--results_dir", f"{folder}/results",
           "--checkpoints", f"{folder}/ckpt"]
    seconds = timed(cmd, dict(os.environ))
    with open(f"{folder}/results/sweep/cells.csv") as f:
        cells = list(csv.DictReader(f))
    overhead = [float(c["seconds"]) - float(c["epoch_seconds"]) for c in cells if c["outcome"] == "done"]
    return seconds, overhead


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data_root", required=True)
    p.add_argument("--model", default="dlinear")
    p.add_argument("--dataset", default="ETTh1")
    p.add_argument("--seeds", default="2021,2022,2023")
    p.add_argument("--repeat", type=int, default=1, help="alternating repetitions of the pair")
    a = p.parse_args()
    seeds, data_root = a.seeds.split(","), os.path.abspath(a.data_root)
    print(f"{a.model} {a.dataset}, seeds {a.seeds}, {os.cpu_count()} cores")
    for r in range(a.repeat):
        with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as other:
            looped = loop(a.model, a.dataset, seeds, data_root, one)
            swept, overhead = sweep(a.model, a.dataset, seeds, data_root, other)
        print(f"repetition {r + 1}: script loop {looped:.1f} s | sweep {swept:.1f} s | loop / sweep "
              f"{looped / swept:.2f} | sweep cells beyond their epochs: mean {sum(overhead) / len(overhead):.2f} s, "
              f"the first of each worker included (min {min(overhead):.2f} s)")


if __name__ == "__main__":
    main()
