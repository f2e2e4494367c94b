"""What probabilistic forecasts cost: a training step with a quantile head against the point model's, and the test's
evaluation with the probabilistic metrics against the point metrics alone.

    python -m scripts.benchmark.probabilistic --data_root ../shared/datasets [--models dlinear,patchtst]
        [--horizon 96] [--steps 40] [--repeats 5] [--threads 1]

Each model runs with its ETTh1 paper script's flags (scripts/long_term_forecast/<model>_ETTh1.sh) and the
horizon asked, built once with --loss mse and once with --loss quantile (--quantiles: the default nine levels).
Timed, in interleaved rounds (scripts.benchmark.throughput.rounds_of), medians printed:
  train   --steps optimizer steps of the training loop (forward, loss, backward, Adam);
  test    the test's forecasts and per-window metrics (Evaluator.window_errors) of each run, with the five point
          metrics alone (the evaluation before the probabilistic metrics existed), then with every metric.
Numbers only; nothing is asserted.
"""
import argparse
import statistics
from unittest import mock

import torch

from scripts.benchmark.throughput import exp_of, ours, rounds_of, timed
from scripts.sweep import paper_cells
from utils import cli, metrics
from utils.process import prepare_training_process


def point_metrics_only():
    """The metrics registry as it was before the probabilistic metrics."""
    point = tuple(m for m in metrics.registry() if not m.probabilistic)
    return mock.patch.object(metrics, "registry", lambda: point)


def test_seconds(exp, only_point: bool) -> float:
    """Seconds of the test's forecasts and metrics: every metric on both scales, or (only_point) the scaled point
    metrics alone, the evaluation before the probabilistic and original-scale metrics."""
    model = exp.running.raw
    model.eval()
    if not only_point:
        return timed(lambda: exp.evaluator.window_errors(model, "test"), exp.env.device)
    with point_metrics_only(), mock.patch.object(exp.evaluator, "_scale", lambda *_: (None, None)):
        return timed(lambda: exp.evaluator.window_errors(model, "test"), exp.env.device)


def measure(argv: list, steps: int, repeats: int, device: torch.device) -> dict:
    point, _ = exp_of(argv + ["--loss", "mse"], device)
    quantile, _ = exp_of(argv + ["--loss", "quantile"], device)
    rounds = rounds_of(repeats, lambda: ours(point, steps)[0], lambda: ours(quantile, steps)[0],
                       lambda: test_seconds(point, True), lambda: test_seconds(point, False),
                       lambda: test_seconds(quantile, True), lambda: test_seconds(quantile, False))
    median = lambda j: statistics.median(r[j] for r in rounds)
    ratio = lambda a, b: statistics.median(r[b] / r[a] for r in rounds)  # paired: the same round's two
    return {"train": (median(0), median(1), ratio(0, 1)), "point run test": (median(2), median(3), ratio(2, 3)),
            "quantile run test": (median(4), median(5), ratio(4, 5))}


def main(argv=None) -> None:
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data_root", default="./dataset", type=cli.existing_folder,
                   help="folder of the benchmark datasets (ETT-small/ETTh1.csv)")
    p.add_argument("--models", default="dlinear,patchtst", help="comma list of models with ETTh1 paper scripts")
    p.add_argument("--horizon", type=cli.at_least(1), default=96)
    p.add_argument("--steps", type=cli.at_least(1), default=40)
    p.add_argument("--repeats", type=cli.at_least(1), default=5)
    p.add_argument("--threads", type=cli.at_least(1), default=1)
    p.add_argument("--device", default="cpu")
    a = p.parse_args(argv)
    prepare_training_process()
    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    print(f"ETTh1, horizon {a.horizon}, {a.steps} steps, median of {a.repeats} rounds, {a.threads} thread(s), "
          f"{device}")
    cells, _ = paper_cells(a.models.split(","), ["ETTh1"], a.data_root, [a.horizon])
    for argv in cells:
        model = argv[argv.index("--model") + 1]
        r = measure(argv, a.steps, a.repeats, device)
        print(f"== {model}")
        t = r["train"]
        print(f"  train {a.steps} steps: point model {t[0]:.3f} s, quantile head {t[1]:.3f} s (x{t[2]:.3f})")
        for run in ("point run test", "quantile run test"):
            t = r[run]
            print(f"  {run}: point metrics {t[0]:.3f} s, every metric {t[1]:.3f} s (x{t[2]:.3f})")

if __name__ == "__main__":
    cli.run(main)
