"""The M4 competition's benchmarks, scored as the competition scored them, beside its published numbers.

    python -m scripts.reproduce.m4_benchmarks --data_root ../shared/datasets [--subsets Hourly Weekly] [--record]

Reads <data_root>/m4/<Subset>-{train,test}.csv (the competition's files), forecasts each series' test horizon with
the competition's benchmarks (utils/m4.py: Naive1, sNaive, Naive2, and SES, Holt, Damped, Theta and their Comb
fitted by statsmodels) and prints each subset's sMAPE, MASE and OWA beside the published values:
github.com/Mcompetitions/M4-methods, "Evaluation and Ranks.xlsx", sheet "Point Forecasts-Frequency", recorded in
scripts/reproduce/paper_results.csv under protocol m4. The published values are rounded to 3 decimals, and their OWA
is computed from the rounded sMAPE and MASE; ours from the unrounded ones.

--record writes the scores, with the commit and machine, to scripts/reproduce/m4_benchmarks.csv (replacing the rows of
the subsets scored): the results page's M4 section shows them beside the networks' runs (analysis/report.py).
"""
import argparse
import csv
import os
import sys
import warnings

import numpy as np
from statsmodels.tools.sm_exceptions import ConvergenceWarning

from analysis.report import DEFAULT_M4_BENCHMARKS, DEFAULT_REFERENCE, load_m4_benchmarks
from data_provider import m4 as m4_data
from utils import cli, m4
from utils.files import write_atomic
from utils.provenance import provenance

RECORD_FIELDS = ("subset", "benchmark", "horizon", "smape", "mase", "owa", "commit", "machine")


def scores(train: list, test: np.ndarray, m: int) -> tuple[dict, int]:
    """(benchmark -> (sMAPE, MASE, OWA) over the subset's series, the fits statsmodels says did not converge)."""
    means = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        forecasts = {name: np.stack([forecast(x, test.shape[1], m) for x in train])
                     for name, forecast in m4.BENCHMARKS.items()}
    for name, f in forecasts.items():
        means[name] = (float(np.mean(m4.smape(test, f).mean(1))),
                       float(np.mean([m4.mase(x, y, p, m).mean() for x, y, p in zip(train, test, f)])))
    naive2 = means["Naive2"]
    unconverged = sum(issubclass(w.category, ConvergenceWarning) for w in caught)
    return {name: (s, a, m4.owa(s, a, *naive2)) for name, (s, a) in means.items()}, unconverged


def published() -> dict:
    """(model, subset) -> (sMAPE, MASE, OWA) of paper_results.csv's m4 rows."""
    with open(DEFAULT_REFERENCE, newline="") as f:
        return {(r["model"], r["dataset"]): tuple(float(r[k]) for k in ("smape", "mase", "owa"))
                for r in csv.DictReader(f) if r["protocol"] == "m4"}


def table(root: str, subsets: list, record: str | None = None) -> str:
    """The scores beside the published ones; record: also write them to that CSV (the rows of other subsets kept)."""
    paper = published()
    lines = ["| subset | benchmark | sMAPE | MASE | OWA | published sMAPE / MASE / OWA |", "|---|---|---|---|---|---|"]
    notes, rows = [], []
    where = provenance()
    commit = (where["git_commit"] or "?")[:7] + ("+changes" if where["git_dirty"] else "")
    for subset in subsets:
        train, test = m4_data.load(root, subset)
        scored, unconverged = scores(train, test, m4_data.SUBSETS[subset].frequency)
        rows += [{"subset": subset, "benchmark": name.lower(), "horizon": test.shape[1], "smape": f"{s:.6g}",
                  "mase": f"{a:.6g}", "owa": f"{o:.6g}", "commit": commit, "machine": where["device"]}
                 for name, (s, a, o) in scored.items()]
        for name, (s, a, o) in scored.items():
            ref = paper.get((name.lower(), subset))
            lines.append(f"| {subset} | {name} | {s:.3f} | {a:.3f} | {o:.3f} | "
                         + (" / ".join(f"{v:.3f}" for v in ref) if ref else "—") + " |")
        if unconverged:
            notes.append(f"{subset}: {unconverged} statsmodels fits reported that their optimiser did not converge")
    if record:
        kept = [r for r in load_m4_benchmarks(record) if r["subset"] not in subsets]

        def write(f):
            out = csv.DictWriter(f, RECORD_FIELDS, lineterminator="\n")
            out.writeheader()
            out.writerows(kept + rows)
        write_atomic(record, write, "w")
        notes.append(f"recorded in {record}")
    return "\n".join(lines + [""] + notes) + "\n"


def main(argv=None) -> str:
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_root", type=cli.existing_folder, required=True, help="the folder holding m4/")
    parser.add_argument("--subsets", nargs="+", default=["Hourly", "Weekly"], choices=list(m4_data.SUBSETS))
    parser.add_argument("--record", nargs="?", const=DEFAULT_M4_BENCHMARKS, default=None,
                        help="write the scores to this CSV (given alone: scripts/reproduce/m4_benchmarks.csv)")
    args = parser.parse_args(argv)
    text = table(os.path.join(args.data_root, "m4"), args.subsets, args.record)
    sys.stdout.write(text)
    return text


if __name__ == "__main__":
    cli.run(main)
