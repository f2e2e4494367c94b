"""Our results beside the papers': a markdown table of dataset x horizon x model.

    python -m utils.report RESULTS_DIR [--reference scripts/reproduce/paper_results.csv] [--out FILE]

Reads every metrics.json under RESULTS_DIR (runs still missing are simply absent), averages repeated
runs of the same cell (and shows their MSE range), matches the paper's number with the same model,
dataset, lookback and horizon, and marks cells whose MSE is worse than the paper's by more than
--tolerance (2%).
"""
import argparse
import csv
import glob
import json
import os
import sys
from collections import defaultdict

DEFAULT_REFERENCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                 "scripts", "reproduce", "paper_results.csv")
Key = tuple  # (dataset, horizon, model, seq_len)


def load_results(results_dir: str) -> dict:
    """Key -> list of metrics dicts, from every metrics.json below results_dir."""
    runs = defaultdict(list)
    for path in glob.glob(os.path.join(results_dir, "**", "metrics.json"), recursive=True):
        with open(path) as f:
            m = json.load(f)
        dataset = m.get("dataset", m.get("data"))  # results written before the dataset field had only data
        runs[(dataset, int(m["test_pred_len"]), m["model"], int(m["seq_len"]))].append(m)
    return runs


def load_reference(path: str) -> dict:
    with open(path, newline="") as f:
        return {(r["dataset"], int(r["horizon"]), r["model"], int(r["seq_len"])): r for r in csv.DictReader(f)}


def _gap(ours: float, paper: float | None) -> float | None:
    return None if paper is None else (ours - paper) / paper


def _cell(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _gap_cell(gap: float | None, tolerance: float) -> str:
    if gap is None:
        return "—"
    text = f"{gap:+.1%}"
    return f"**{text}** ✗" if gap > tolerance else text


def _runs_cell(mses: list) -> str:
    return "1" if len(mses) == 1 else f"{len(mses)}: {min(mses):.3f}–{max(mses):.3f}"


def build_table(runs: dict, reference: dict, tolerance: float = 0.02) -> tuple:
    """(markdown table, number of cells worse than the paper by more than tolerance)."""
    order = {"ETTh1": 0, "ETTh2": 1, "ETTm1": 2, "ETTm2": 3, "Weather": 4, "ECL": 5, "Traffic": 6, "Exchange": 7,
             "ILI": 8}
    lines = ["| dataset | horizon | model | lookback | MSE | paper MSE | MSE gap | MAE | paper MAE | MAE gap "
             "| runs: MSE range |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    misses = 0
    for key in sorted(runs, key=lambda k: (order.get(k[0], 99), k[0], k[1], k[2], k[3])):
        dataset, horizon, model, seq_len = key
        mses = [m["mse"] for m in runs[key]]
        mse = sum(mses) / len(mses)
        mae = sum(m["mae"] for m in runs[key]) / len(runs[key])
        paper = reference.get(key)
        paper_mse = float(paper["mse"]) if paper else None
        paper_mae = float(paper["mae"]) if paper else None
        mse_gap = _gap(mse, paper_mse)
        misses += mse_gap is not None and mse_gap > tolerance
        lines.append(f"| {dataset} | {horizon} | {model} | {seq_len} | {mse:.3f} | {_cell(paper_mse)} | "
                     f"{_gap_cell(mse_gap, tolerance)} | {mae:.3f} | {_cell(paper_mae)} | "
                     f"{_gap_cell(_gap(mae, paper_mae), tolerance)} | {_runs_cell(mses)} |")
    return "\n".join(lines), misses


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results_dir")
    parser.add_argument("--reference", default=DEFAULT_REFERENCE, help="CSV of published numbers")
    parser.add_argument("--out", default=None, help="markdown file to write (default: RESULTS_DIR/report.md)")
    parser.add_argument("--tolerance", type=float, default=0.02, help="relative MSE gap that marks a miss")
    args = parser.parse_args(argv)
    runs = load_results(args.results_dir)
    if not runs:
        raise SystemExit(f"no metrics.json under {args.results_dir}")
    table, misses = build_table(runs, load_reference(args.reference), args.tolerance)
    text = (f"{table}\n\n{len(runs)} cells; {misses} worse than the paper's MSE by more than "
            f"{args.tolerance:.0%} (✗). Gap = (ours - paper) / paper.\n")
    out = args.out or os.path.join(args.results_dir, "report.md")
    with open(out, "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
