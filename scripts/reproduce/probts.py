"""ProbTS's long-term ETTh1 cells, reproduced: CRPS and NMAE on the original scale, per test window, one window
every 96 steps.

    python -m scripts.reproduce.probts --data_root ../shared/datasets [--models dlinear patchtst]
        [--horizons 96 192] [--seeds 3] [--results results/probts] [--score_only]

The source: ProbTS (Zhang et al., NeurIPS 2024 Datasets and Benchmarks), Table 1 of its supervised-model benchmark
(github.com/microsoft/ProbTS, docs/benchmark/supervised_model/README.md: long-term forecasting, lookback 96, mean of
five seeds); the numbers are in scripts/reproduce/paper_results.csv (protocol probts). ProbTS scores the point
models of that table as point masses, so their CRPS equals their NMAE.

Its protocol, as its code has it (docs/probabilistic.md says more):
  data     TSLib's ETTh1 borders (12/4/4 months), each channel standardised on the training rows; ours alike;
  test     one window every 96 steps (test_rolling_length 96): targets start at the test split's first row + 96 i,
           for i < ceil((2880 - H) / 96); 29 windows at H 96. Every window is tested here; the score takes those;
  metrics  per window, on the original scale: NMAE = sum |y - median| / sum |y| and CRPS = the mean over the 19
           levels 0.05..0.95 of 2 sum pinball / sum |y|, averaged over the windows: our nmae_original and
           ncrps_original (utils/metrics/normalised.py) of those windows;
  training Adam at a constant lr on MSE, 50 epochs of 100 batches of 32 (PatchTST: gradients accumulated over 4),
           the epoch of the best validation CRPS tested. Here: the same optimizer steps (--train_steps), validated
           as often (--val_every), the best validation loss (MSE on the scaled data, every validation window) tested.
Model settings are ProbTS's configs (config/ltsf/etth1/{dlinear,patchtst}.yaml); PatchTST's per-channel heads
(`individual: true`) are one shared head here.
"""
import argparse
import glob
import json
import math
import os
import statistics
import subprocess
import sys

import numpy as np

from analysis.report import DEFAULT_REFERENCE, load_reference
from utils import cli
from utils.errors import ConfigError, TrainingError
from utils.files import write_atomic
from utils.outputs import WINDOW_ERRORS

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOOKBACK, STRIDE, TOLERANCE = 96, 96, 0.05
STEPS, VALIDATIONS = 50 * 100, 50  # ProbTS: 50 epochs of 100 batches, tested at the epoch validated best
MODELS = {  # config/ltsf/etth1/<model>.yaml
    "dlinear": ["--individual", "--learning_rate", "0.005"],
    "patchtst": ["--patch_len", "16", "--stride", "8", "--d_model", "16", "--e_layers", "3", "--n_heads", "4",
                 "--d_ff", "256", "--dropout", "0.3", "--head_dropout", "0", "--use_norm", "--learning_rate", "1e-4"],
}
ACCUMULATION = {"patchtst": 4}  # accumulate_grad_batches


def run_flags(model: str, horizon: int, data_root: str) -> list:
    steps = STEPS // ACCUMULATION.get(model, 1)  # optimizer steps
    return ["--model", model, "--nonautoregressive", "--data", "ETTh1",
            "--root_path", os.path.join(data_root, "ETT-small"), "--seq_len", str(LOOKBACK),
            "--output_token_len", str(horizon), "--batch_size", "32", "--lradj", "constant",
            "--train_steps", str(steps), "--val_every", str(steps // VALIDATIONS), "--patience", str(VALIDATIONS),
            "--no_epoch_test", "--des", "probts", "--accum_steps", str(ACCUMULATION.get(model, 1)), *MODELS[model]]


def probts_windows(n_windows: int, horizon: int) -> np.ndarray:
    """Our test windows that are ProbTS's: the window j forecasts from the test split's row j, and ProbTS's
    i-th from row 96 i, for i < ceil((test rows - H) / 96), the test rows being n_windows + H - 1."""
    return STRIDE * np.arange(math.ceil((n_windows - 1) / STRIDE))


def score(results: str, model: str, horizon: int) -> list:
    """(seed, nmae, crps) of every tested run of the model at the horizon: ProbTS's windows' means."""
    found = []
    for path in sorted(glob.glob(os.path.join(results, "*", f"tp{horizon}", "metrics.json"))):
        with open(path) as f:
            m = json.load(f)
        if m["model"] != model or m["dataset"] != "ETTh1" or m["seq_len"] != LOOKBACK:
            continue
        errors = np.load(os.path.join(os.path.dirname(path), WINDOW_ERRORS))
        chosen = probts_windows(len(errors["nmae_original"]), horizon)
        found.append((m["seed"], float(errors["nmae_original"][chosen].mean()),
                      float(errors["ncrps_original"][chosen].mean())))
    return found


def _spread(values: list) -> str:
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}" if len(values) > 1 else f"{values[0]:.3f}"


def table(results: str, models: list, horizons: list) -> str:
    published = load_reference(DEFAULT_REFERENCE, "probts")
    lines = [f"ProbTS long-term ETTh1, lookback {LOOKBACK}: original scale, one test window every {STRIDE} steps "
             "(mean ± std over seeds; a point model's CRPS is its NMAE)", "",
             "| model | horizon | seeds | NMAE | CRPS | ProbTS CRPS = NMAE | gap |", "|---|---|---|---|---|---|---|"]
    for model in models:
        for horizon in horizons:
            scores = score(results, model, horizon)
            if not scores:
                lines.append(f"| {model} | {horizon} | 0 | — | — | — | not run |")
                continue
            nmae, crps = [s[1] for s in scores], [s[2] for s in scores]
            paper = published.get((model, "ETTh1", LOOKBACK, horizon))
            gap = ""
            if paper:
                rel = statistics.mean(crps) / float(paper["crps"]) - 1
                gap = f"{rel:+.1%} {'✓' if abs(rel) <= TOLERANCE else '✗'}"
            lines.append(f"| {model} | {horizon} | {len(scores)} | {_spread(nmae)} | {_spread(crps)} | "
                         f"{paper['crps'] if paper else '—'} | {gap} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> str:
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_root", type=cli.existing_folder, required=True,
                        help="the folder holding ETT-small/ETTh1.csv")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--horizons", nargs="+", type=int, default=[96, 192], choices=(96, 192, 336, 720))
    parser.add_argument("--seeds", type=cli.at_least(1), default=3, help="repetitions (seeds 2021, 2022, ...)")
    parser.add_argument("--results", default=os.path.join("results", "probts"))
    parser.add_argument("--checkpoints", default=os.path.join("checkpoints", "probts"))
    parser.add_argument("--score_only", action="store_true", help="score the runs in --results, train nothing")
    args = parser.parse_args(argv)
    if not os.path.isfile(os.path.join(args.data_root, "ETT-small", "ETTh1.csv")):
        raise ConfigError(f"--data_root {args.data_root}: no ETT-small/ETTh1.csv there")
    if not args.score_only:
        for model in args.models:
            for horizon in args.horizons:
                cmd = [sys.executable, os.path.join(HERE, "run.py"), *run_flags(model, horizon, args.data_root),
                       "--itr", str(args.seeds), "--results_dir", args.results, "--checkpoints", args.checkpoints,
                       "--resume", "auto"]
                if subprocess.run(cmd).returncode:
                    raise TrainingError(f"the {model} run at horizon {horizon} failed: {' '.join(cmd)}")
    text = table(args.results, args.models, args.horizons)
    write_atomic(os.path.join(args.results, "report.md"), lambda f: f.write(text), "w")
    sys.stdout.write(text)
    return text


if __name__ == "__main__":
    cli.run(main)
