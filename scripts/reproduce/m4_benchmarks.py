"""The M4 competition's benchmarks, scored as the competition scored them, beside its published numbers.

    python -m scripts.reproduce.m4_benchmarks --data_root ../shared/datasets [--subsets Hourly Weekly] [--record]
        [--stats_python .venv-m4/bin/python]

Reads <data_root>/m4/<Subset>-{train,test}.csv (the competition's files), forecasts each series' test horizon with
the competition's benchmarks (utils/m4.py: Naive1, sNaive, Naive2, and SES, Holt, Damped, Theta and their Comb
fitted by statsmodels) and prints each subset's sMAPE, MASE and OWA beside the published values:
github.com/Mcompetitions/M4-methods, "Evaluation and Ranks.xlsx", sheet "Point Forecasts-Frequency", recorded in
scripts/reproduce/paper_results.csv under protocol m4. The published values are rounded to 3 decimals, and their OWA
is computed from the rounded sMAPE and MASE; ours from the unrounded ones.

The competition also scored 95% prediction intervals (MSIS and ACD, sheet "Prediction Intervals-Frequency") of three
benchmarks: Naive1 (scored here always), ETS and ARIMA. These two are R forecast's ets() and auto.arima(), whose
ports are statsforecast's; it cannot be installed beside the framework's pins (it requires pandas < 3), so
--stats_python names the interpreter of an environment made for it:

    python3 -m venv .venv-m4 && .venv-m4/bin/pip install -r requirements-m4-statistical.txt

scripts/reproduce/m4_statistical.py runs there, and its forecasts are scored here like the others'. They are kept
in --stats_cache under the subset files' fingerprint, so an interrupted run goes on where it stopped and a changed
file is forecast anew.

--record writes the scores, with the commit and machine, to scripts/reproduce/m4_benchmarks.csv (replacing the rows of
the subsets scored): the results page's M4 section shows them beside the networks' runs (analysis/report.py).
"""
import argparse
import csv
import os
import subprocess
import sys
import warnings

import numpy as np
from statsmodels.tools.sm_exceptions import ConvergenceWarning

from analysis.report import DEFAULT_M4_BENCHMARKS, DEFAULT_REFERENCE, HERE, load_m4_benchmarks
from data_provider import m4 as m4_data
from utils import cli, m4
from utils.errors import ConfigError
from utils.files import write_atomic
from utils.provenance import provenance

RECORD_FIELDS = ("subset", "benchmark", "horizon", "smape", "mase", "owa", "msis", "acd", "commit", "machine")
MEASURES = ("smape", "mase", "owa", "msis", "acd")
STATISTICAL = ("ETS", "ARIMA")  # forecast by statsforecast in its own environment
WORKER = os.path.join(HERE, "scripts", "reproduce", "m4_statistical.py")
MAKE_ENVIRONMENT = "python3 -m venv .venv-m4 && .venv-m4/bin/pip install -r requirements-m4-statistical.txt"


def scores(train: list, test: np.ndarray, m: int, statistical: dict | None = None) -> tuple[dict, int]:
    """(benchmark -> (sMAPE, MASE, OWA, MSIS, ACD) over the subset's series, MSIS and ACD None for a benchmark
    without intervals; the fits statsmodels says did not converge). statistical: name -> (mean, lo, hi) forecasts
    made elsewhere (series x horizon), scored alike."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        forecasts = {name: (np.stack([forecast(x, test.shape[1], m) for x in train]), None)
                     for name, forecast in m4.BENCHMARKS.items()}
    unconverged = sum(issubclass(w.category, ConvergenceWarning) for w in caught)
    forecasts["Naive1"] = (forecasts["Naive1"][0],
                           tuple(np.stack(b) for b in zip(*(m4.naive1_interval(x, test.shape[1]) for x in train))))
    for name, (mean, lo, hi) in (statistical or {}).items():
        forecasts[name] = (mean, (lo, hi))
    means = {}
    for name, (f, interval) in forecasts.items():
        means[name] = [float(np.mean(m4.smape(test, f).mean(1))),
                       float(np.mean([m4.mase(x, y, p, m).mean() for x, y, p in zip(train, test, f)]))]
        if interval is not None:
            lo, hi = interval
            means[name] += [float(np.mean([m4.msis(x, y, a, b, m).mean() for x, y, a, b in zip(train, test, lo, hi)])),
                            m4.acd(test, lo, hi)]
        else:
            means[name] += [None, None]
    naive2 = means["Naive2"][:2]
    return {name: (s, a, m4.owa(s, a, *naive2), i, c) for name, (s, a, i, c) in means.items()}, unconverged


def statistical_forecasts(root: str, subset: str, train: list, python: str, cache: str, processes: int) -> tuple:
    """({ETS, ARIMA} -> (mean, lo, hi)) forecast by m4_statistical.py in the environment of `python`, and notes
    (statsforecast's version, the warnings its fits raised)."""
    spec = m4_data.SUBSETS[subset]
    data = m4_data.fingerprint(root, subset)
    os.makedirs(cache, exist_ok=True)
    series = os.path.join(cache, f"{subset}-{data}-series.npz")
    if not os.path.isfile(series):
        write_atomic(series, lambda f: np.savez(f, values=np.concatenate(train), lengths=[len(x) for x in train]))
    found, notes = {}, []
    for name in STATISTICAL:
        out = os.path.join(cache, f"{subset}-{data}-{name}.npz")
        done = subprocess.run([python, WORKER, series, out, "--model", name, "--season", str(spec.frequency),
                               "--horizon", str(spec.horizon), "--processes", str(processes)],
                              stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
        if done.returncode:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise ConfigError(f"{name} forecasts of {subset} failed ({python} {WORKER}): {last}")
        with np.load(out) as f:
            found[name] = (f["mean"], f["lo"], f["hi"])
            notes.append(f"{subset} {name}: statsforecast {f['version']}, {int(f['warnings'])} warnings from its fits"
                         + (f", {int(f['corrected'])} intervals of multiplicative-season models computed as R does "
                            "(m4_statistical.py)" if int(f["corrected"]) else ""))
    return found, notes


def check_stats_python(python: str) -> None:
    try:
        ok = subprocess.run([python, "-c", "import statsforecast"], capture_output=True).returncode == 0
    except OSError:
        ok = False
    if not ok:
        raise ConfigError(f"--stats_python {python}: cannot import statsforecast there; make that environment with: "
                          f"{MAKE_ENVIRONMENT}")


def published() -> dict:
    """(model, subset) -> {measure: value or None} of paper_results.csv's m4 rows."""
    with open(DEFAULT_REFERENCE, newline="") as f:
        return {(r["model"], r["dataset"]): {k: float(r[k]) if r[k] else None for k in MEASURES}
                for r in csv.DictReader(f) if r["protocol"] == "m4"}


def _cells(values, between: str = " / ") -> str:
    return between.join("—" if v is None else f"{v:.3f}" for v in values)


def table(root: str, subsets: list, record: str | None = None, stats_python: str | None = None,
          stats_cache: str | None = None, processes: int = 1) -> str:
    """The scores beside the published ones; record: also write them to that CSV (the rows of other subsets kept)."""
    if stats_python:
        check_stats_python(stats_python)
    paper = published()
    lines = ["| subset | benchmark | sMAPE | MASE | OWA | MSIS | ACD | published sMAPE / MASE / OWA | published MSIS / "
             "ACD |", "|---|---|---|---|---|---|---|---|---|"]
    notes, rows = [], []
    where = provenance()
    commit = (where["git_commit"] or "?")[:7] + ("+changes" if where["git_dirty"] else "")
    for subset in subsets:
        train, test = m4_data.load(root, subset)
        statistical = None
        if stats_python:
            statistical, more = statistical_forecasts(root, subset, train, stats_python, stats_cache, processes)
            notes += more
        scored, unconverged = scores(train, test, m4_data.SUBSETS[subset].frequency, statistical)
        rows += [{"subset": subset, "benchmark": name.lower(), "horizon": test.shape[1], "commit": commit,
                  "machine": where["device"], **{k: "" if v is None else f"{v:.6g}" for k, v in zip(MEASURES, values)}}
                 for name, values in scored.items()]
        for name, values in scored.items():
            ref = paper.get((name.lower(), subset))
            lines.append(f"| {subset} | {name} | {_cells(values, ' | ')} | "
                         + (" | ".join(_cells(ref[k] for k in keys) for keys in (MEASURES[:3], MEASURES[3:]))
                            if ref else "— | —") + " |")
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
    parser.add_argument("--stats_python", help="the python of an environment with statsforecast "
                        f"({MAKE_ENVIRONMENT}): also ETS and ARIMA")
    parser.add_argument("--stats_cache", default=os.path.join(HERE, "results", "m4_statistical"),
                        help="where their forecasts are kept (results/m4_statistical)")
    parser.add_argument("--processes", type=cli.at_least(1), default=os.cpu_count() or 1,
                        help="processes fitting them (one per CPU core)")
    args = parser.parse_args(argv)
    text = table(os.path.join(args.data_root, "m4"), args.subsets, args.record, args.stats_python, args.stats_cache,
                 args.processes)
    sys.stdout.write(text)
    return text


if __name__ == "__main__":
    cli.run(main)
