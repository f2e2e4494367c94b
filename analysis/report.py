"""Our results beside the papers': a markdown table, one row per configuration and test.

    python -m analysis.report RESULTS_DIR [--reference scripts/reproduce/paper_results.csv] [--out FILE]
                                          [--page docs/results.md]

Reads every metrics.json under RESULTS_DIR. Runs are grouped by identity: one row holds the runs of one
configuration (its config_id) on one test, so the seeds of a configuration are the only thing averaged
(their count and MSE range are shown). A row is compared with the paper's number only when its whole
configuration is the paper's setting for that horizon (scripts/reproduce/paper_settings.json, written by
scripts/make_scripts.py from the paper-setting scripts): lookback, trained and tested horizon, epochs,
schedule, batch, model size... Gaps worse than --tolerance (2%) are marked. The report ends with every run
it left out of the comparison, and why.

--page also writes the results page: per dataset, each model's paper-setting runs (seeds averaged) at every
horizon beside the paper's numbers, the averages over the four horizons as papers print them (best MSE and
MAE per column in bold), the MSE range over seeds where a cell has several, and the wall time of a run (its
epochs' training and evaluation) on the machine used.

--ledger FILE keeps the page's runs in a CSV that lives in the repository (scripts/reproduce/runs.csv): run
folders are outputs of one machine and are lost with it, the page must not be. RESULTS_DIR's paper-setting runs
not yet in the ledger are appended to it, and the page is written from the ledger. A ledger row is one cell
(model, dataset, lookback, horizon, test) run with one or more seeds, the paper setting it was run as (a hash:
a row whose setting the scripts no longer hold is listed below the tables, not in them), the commit and the machine.
"""
import argparse
import csv
import glob
import json
import os
import sys
from collections import defaultdict

from utils import cli
from utils.errors import ConfigError
from utils.files import write_atomic
from utils.fingerprints import config_hash
from utils.m4 import weighted_average
from utils.provenance import machine_kind

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_REFERENCE = os.path.join(HERE, "scripts", "reproduce", "paper_results.csv")
DEFAULT_SETTINGS = os.path.join(HERE, "scripts", "reproduce", "paper_settings.json")
DEFAULT_LEDGER = os.path.join(HERE, "scripts", "reproduce", "runs.csv")
LEDGER_FIELDS = ("model", "dataset", "seq_len", "horizon", "test", "seeds", "mse", "mae", "mse_min", "mse_max",
                 "seconds", "setting_id", "commit", "machine", "source", "smape", "mase", "owa", "protocol")
SHORT_TERM = ("smape", "mase", "owa")  # the short-term task's measures (M4), recorded for its runs
INTERVALS = ("msis", "acd")  # the M4 competition's measures of 95% intervals, of its interval benchmarks
M4_PREFIX = "M4-"  # a short-term run's dataset: M4-<subset>
# data_provider/protocols/ (analysis imports no data_provider; tests/unit/test_protocols.py holds them equal)
LONG_TERM_PROTOCOLS = ("tslib", "tfb")
SEARCHES_LOOKBACK = ("tfb",)  # protocols whose papers keep the lookback best on validation (Protocol.lookbacks)
DEFAULT_M4_BENCHMARKS = os.path.join(HERE, "scripts", "reproduce", "m4_benchmarks.csv")
ORDER = {"ETTh1": 0, "ETTh2": 1, "ETTm1": 2, "ETTm2": 3, "Weather": 4, "ECL": 5, "Traffic": 6, "Exchange": 7, "ILI": 8}
# what a configuration must share with the paper's setting; the data file is compared by name, not by
# fingerprint (each machine has its own copy), and free-form tags do not count
COMPARED = ("model", "task", "training")
# compared through what they make together, the global batch and the effective learning rate
PER_PROCESS = ("seed", "batch_size", "learning_rate", "world_size")


def load_runs(results_dir: str) -> tuple:
    """(groups: (config_id, test) -> [metrics of each seed], skipped: [(path, reason)])."""
    groups, skipped, seen = defaultdict(list), [], {}
    for path in sorted(glob.glob(os.path.join(results_dir, "**", "metrics.json"), recursive=True)):
        with open(path) as f:
            try:
                m = json.load(f)
            except json.JSONDecodeError as e:
                skipped.append((path, f"not readable as JSON ({e}): test its run again (--is_training 0)"))
                continue
        if "config_id" not in m:
            skipped.append((path, "written before run identities (no config_id): rerun it"))
            continue
        key = (m["config_id"], m["test"])
        if (key, m["seed"]) in seen:  # a copied run folder: the same run twice
            skipped.append((path, f"the same run as {seen[key, m['seed']]}"))
            continue
        seen[key, m["seed"]] = path
        m["folder"] = os.path.dirname(path)
        m["run_seconds"] = _run_seconds(os.path.dirname(m["folder"]))
        groups[key].append(m)
    return groups, skipped


def is_short_term(m: dict) -> bool:
    """A run of the short-term task (the M4 protocol: docs/short_term.md)."""
    return m["config"]["task"].get("task") == "short_term"


def run_protocol(m: dict) -> str:
    """The evaluation protocol a long-term run was split and scored under (--protocol: docs/protocols.md)."""
    return m["config"]["task"].get("protocol", "tslib")


def is_published_zero_shot(m: dict) -> bool:
    """A zero-shot test of a published checkpoint (--pretrained with --is_training 0: docs/foundation.md)."""
    return "zero_shot_from_published" in m["config"]["training"]


def zero_shot_table(groups: dict, reference: dict, tolerance: float = 0.02) -> str:
    """Zero-shot tests of published checkpoints beside the published zero-shot numbers (paper_results.csv, protocol
    zero_shot), matched on model, dataset, lookback, horizon and the checkpoint, which a run names with --des (the
    scripts in scripts/zero_shot/ do). Empty: no such run."""
    runs = [rs for rs in groups.values() if is_published_zero_shot(rs[0])]
    if not runs:
        return ""
    lines = ["| dataset | horizon | model | checkpoint (--des) | lookback | MSE | paper MSE | MSE gap | MAE | paper MAE "
             "| MAE gap | published in |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for rs in sorted(runs, key=lambda rs: (ORDER.get(rs[0]["dataset"], 99), rs[0]["dataset"], rs[0]["model"],
                                           rs[0]["config"]["tag"].get("des", ""), rs[0]["test_pred_len"])):
        m = rs[0]
        checkpoint = m["config"]["tag"].get("des", "")
        paper = reference.get((m["model"], m["dataset"], m["seq_len"], m["test_pred_len"], checkpoint)) \
            if m["test"] == f"tp{m['test_pred_len']}" else None  # the papers test every window
        mse, mae = (sum(r[k] for r in rs) / len(rs) for k in ("mse", "mae"))
        paper_mse, paper_mae = _published(paper, "mse"), _published(paper, "mae")
        lines.append(f"| {m['dataset']} | {m['test_pred_len']} | {m['model']} | {checkpoint} | {m['seq_len']} | "
                     f"{mse:.3f} | {_cell(paper_mse)} | {_gap_cell(_gap(mse, paper_mse), tolerance)} | {mae:.3f} | "
                     f"{_cell(paper_mae)} | {_gap_cell(_gap(mae, paper_mae), tolerance)} | "
                     f"{paper['paper'] + ', ' + paper['table'] if paper else '—'} |")
    return "\n".join(lines)


def load_zero_shot_reference(path: str) -> dict:
    """(model, dataset, lookback, horizon, checkpoint) -> the published zero-shot row."""
    with open(path, newline="") as f:
        return {(r["model"], r["dataset"], int(r["seq_len"]), int(r["horizon"]), r["checkpoint"]): r
                for r in csv.DictReader(f) if r.get("protocol") == "zero_shot"}


def no_runs(results_dir: str, skipped: list) -> ConfigError:
    """The error of a results folder that holds no run to report or compare."""
    return ConfigError(f"no metrics.json of a run under {results_dir}" +
                       (f" ({len(skipped)} skipped: {skipped[0][1]})" if skipped else ""))


def _run_seconds(run_dir: str) -> float | None:
    """Training + evaluation seconds of a run's epochs, from its history.csv (None: no history there)."""
    path = os.path.join(run_dir, "history.csv")
    if not os.path.isfile(path):
        return None
    with open(path, newline="") as f:
        return sum(float(r["train_seconds"]) + float(r["eval_seconds"]) for r in csv.DictReader(f))


def _best_vali_loss(m: dict) -> float | None:
    """The validation loss of a run's best epoch, from its history.csv (None: no history there)."""
    path = os.path.join(os.path.dirname(m["folder"]), "history.csv")
    if not os.path.isfile(path):
        return None
    with open(path, newline="") as f:
        return next((float(r["vali_loss"]) for r in csv.DictReader(f) if int(r["epoch"]) == m["best_epoch"]), None)


def lookback_choice_table(groups: dict) -> str:
    """For the protocols that search the lookback on validation (TFB's 96, 336 and 512): among the configurations
    that differ only in --seq_len, the one whose best epoch's validation loss (mean over seeds) is lowest, with its
    test scores; '' where no configuration was run at two lookbacks."""
    searched = defaultdict(dict)  # (configuration but the lookback, test) -> lookback -> runs
    for runs in groups.values():
        m = runs[0]
        if is_short_term(m) or run_protocol(m) not in SEARCHES_LOOKBACK:
            continue
        task = {k: v for k, v in m["config"]["task"].items() if k != "seq_len"}
        training = {k: v for k, v in m["config"]["training"].items() if k != "seed"}
        searched[json.dumps({**m["config"], "task": task, "training": training}, sort_keys=True), m["test"]][
            m["seq_len"]] = runs
    def order(by_lookback: dict) -> tuple:
        m = next(iter(by_lookback.values()))[0]
        return ORDER.get(m["dataset"], 99), m["dataset"], m["test_pred_len"], m["model"]

    lines = ["| dataset | horizon | model | validation loss by lookback | chosen | MSE | MAE |",
             "|---|---|---|---|---|---|---|"]
    for by_lookback in sorted((v for v in searched.values() if len(v) > 1), key=order):
        losses = {}
        for lookback, runs in sorted(by_lookback.items()):
            found = [_best_vali_loss(r) for r in runs]
            losses[lookback] = None if None in found else sum(found) / len(found)
        scored = {k: v for k, v in losses.items() if v is not None}
        if not scored:
            continue
        chosen = min(scored, key=scored.get)
        runs = by_lookback[chosen]
        m = runs[0]
        tried = ", ".join(f"{k}: {'—' if v is None else f'{v:.4f}'}" for k, v in losses.items())
        lines.append(f"| {dataset_label(m['dataset'], run_protocol(m))} | {m['test_pred_len']} | {m['model']} | "
                     f"{tried} | {chosen} | {sum(r['mse'] for r in runs) / len(runs):.3f} | "
                     f"{sum(r['mae'] for r in runs) / len(runs):.3f} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def load_reference(path: str, protocol: str = "tslib") -> dict:
    """(model, dataset, lookback, horizon) -> the published row of an evaluation protocol: tslib (the long-term
    papers' MSE and MAE) or probts (CRPS and NMAE: scripts/reproduce/probts.py)."""
    with open(path, newline="") as f:
        return {(r["model"], r["dataset"], int(r["seq_len"]), int(r["horizon"])): r for r in csv.DictReader(f)
                if r.get("protocol", "tslib") == protocol}


def load_settings(path: str) -> dict:
    """(model, dataset, horizon, protocol) -> the configuration of the paper-setting script for that horizon, with
    the test it names where that is not every window ("test": tp96_droplast2048, the original code's)."""
    if not os.path.isfile(path):
        return {}
    with open(path) as f:
        return {(s["model"], s["dataset"], s["horizon"], s["config"]["task"].get("protocol", "tslib")):
                {**s["config"], **({"test": s["test"]} if "test" in s else {})} for s in json.load(f)}


def paper_setting(settings: dict, m: dict) -> dict | None:
    """The paper-setting configuration of a run's model, dataset, horizon and protocol (None: no script sets it)."""
    return settings.get((m["model"], m["dataset"], m["test_pred_len"], run_protocol(m)))


def dataset_label(dataset: str, protocol: str) -> str:
    """How tables name a dataset: with its protocol where that is not TSLib's (ETTh1 (tfb))."""
    return dataset if protocol == "tslib" else f"{dataset} ({protocol})"


def paper_mismatch(run: dict, setting: dict | None) -> str | None:
    """Why a run is not the paper's setting (None: it is)."""
    if setting is None:
        return "no paper setting for this model, dataset and horizon"
    expected = setting.get("test", f"tp{run['test_pred_len']}")
    if run["test"] != expected:
        return f"test {run['test']} is not the paper's protocol ({expected})"
    ours = run["config"]
    found = [f"{k} {ours[s].get(k)} (paper {v})" for s in COMPARED for k, v in setting[s].items()
             if k not in PER_PROCESS and ours[s].get(k) != v]
    found += [f"{k} {v} (paper: unset)" for s in COMPARED for k, v in ours[s].items()
              if k not in PER_PROCESS and k not in setting[s]]
    for k in ("data", "target", "file"):
        if ours["data"].get(k) != setting["data"].get(k):
            found.append(f"{k} {ours['data'].get(k)} (paper {setting['data'].get(k)})")
    paper_batch = setting["training"]["batch_size"] * setting["training"]["accum_steps"]
    if run["global_batch_size"] != paper_batch:
        found.append(f"global batch {run['global_batch_size']} on {run['world_size']} processes (paper {paper_batch})")
    if run["effective_lr"] != setting["training"]["learning_rate"]:
        found.append(f"effective lr {run['effective_lr']:g} (paper {setting['training']['learning_rate']:g})")
    return "differs from the paper's setting: " + ", ".join(found) if found else None


def _published(paper: dict | None, metric: str) -> float | None:
    """A published number of a reference row (None: no row, or a cell the source leaves empty, as N-HiTS's MAE)."""
    return float(paper[metric]) if paper and paper.get(metric) else None


def _gap(ours: float, paper: float | None) -> float | None:
    return None if paper is None else (ours - paper) / paper


def _cell(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _percent(gap: float | None) -> str:
    """A relative gap as papers print it: one decimal, a true minus sign, no signed zero."""
    if gap is None:
        return "—"
    tenths = round(gap * 1000)
    return "0.0%" if tenths == 0 else f"{'+' if tenths > 0 else '−'}{abs(tenths) / 10:.1f}%"


def _gap_cell(gap: float | None, tolerance: float) -> str:
    text = _percent(gap)
    return f"**{text}** ✗" if gap is not None and gap > tolerance else text


def _runs_cell(mses: list) -> str:
    return "1" if len(mses) == 1 else f"{len(mses)}: {min(mses):.3f}–{max(mses):.3f}"


def load_long_term_references(path: str) -> dict:
    """protocol -> load_reference(path, protocol) for each protocol a long-term run may be scored under."""
    return {protocol: load_reference(path, protocol) for protocol in LONG_TERM_PROTOCOLS}


def build_table(groups: dict, references: dict, settings: dict, tolerance: float = 0.02) -> tuple:
    """(markdown table, cells compared, cells worse than the paper by more than tolerance, notes on the rows not at
    the paper's setting, rows with no paper number). Each run is compared with the numbers published under its own
    protocol (references: load_long_term_references); a protocol other than TSLib's is named beside the dataset."""
    lines = ["| dataset | horizon | model | lookback | runs: MSE range | MSE | paper MSE | MSE gap | MAE | paper MAE "
             "| MAE gap | configuration |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    compared = misses = unpublished = 0
    notes = []

    def order(key):
        m = groups[key][0]
        return ORDER.get(m["dataset"], 99), m["dataset"], m["test_pred_len"], m["model"], m["seq_len"], key

    for key in sorted((key for key in groups if not is_short_term(groups[key][0])
                       and not is_published_zero_shot(groups[key][0])), key=order):
        runs = groups[key]
        m = runs[0]
        mses = [r["mse"] for r in runs]
        mse, mae = sum(mses) / len(mses), sum(r["mae"] for r in runs) / len(runs)
        protocol = run_protocol(m)
        paper = references[protocol].get((m["model"], m["dataset"], m["seq_len"], m["test_pred_len"]))
        unpublished += paper is None
        reason = paper_mismatch(m, paper_setting(settings, m)) if paper else None
        if reason:
            notes.append(f"{m['model']} {m['dataset']} {m['test']} ({m['config_id']}, {len(runs)} runs): {reason}")
            paper = None
        paper_mse, paper_mae = _published(paper, "mse"), _published(paper, "mae")
        mse_gap = _gap(mse, paper_mse)
        compared += paper is not None
        misses += mse_gap is not None and mse_gap > tolerance
        lines.append(f"| {dataset_label(m['dataset'], protocol)} | {m['test_pred_len']} | {m['model']} | "
                     f"{m['seq_len']} | {_runs_cell(mses)} | {mse:.3f} | {_cell(paper_mse)} | {_gap_cell(mse_gap, tolerance)} | {mae:.3f} | "
                     f"{_cell(paper_mae)} | {_gap_cell(_gap(mae, paper_mae), tolerance)} | {m['config_id']} |")
    return "\n".join(lines), compared, misses, notes, unpublished


def short_term_table(groups: dict, m4_reference: dict) -> str:
    """Short-term runs (M4) per subset: each configuration's sMAPE, MASE and OWA, its seeds averaged, then the
    competition's published rows of that subset (scripts/reproduce/paper_results.csv, protocol m4). Empty: none."""
    by_subset = defaultdict(list)
    for runs in groups.values():
        if is_short_term(runs[0]):
            by_subset[runs[0]["dataset"].removeprefix(M4_PREFIX)].append(runs)
    if not by_subset:
        return ""
    lines = ["| subset | model | lookback | runs | sMAPE | MASE | OWA | configuration |",
             "|---|---|---|---|---|---|---|---|"]
    lines += _over_subsets(by_subset)
    for subset in sorted(by_subset, key=_subset_order):
        for runs in sorted(by_subset[subset], key=lambda rs: (rs[0]["model"], rs[0]["seq_len"], rs[0]["config_id"])):
            m = runs[0]
            means = (sum(r[k] for r in runs) / len(runs) for k in SHORT_TERM)
            lines.append(f"| {subset} | {m['model']} | {m['seq_len']} | {len(runs)} | "
                         + " | ".join(f"{v:.3f}" for v in means) + f" | {m['config_id']} |")
        lines += [f"| {subset} | {model} (published) | | | " + " | ".join(r[k] or "—" for k in SHORT_TERM) + " | |"
                  for (model, dataset, _, _), r in m4_reference.items() if dataset == subset]
    return "\n".join(lines)


def m4_section(rows: list, m4_reference: dict, benchmarks: list) -> list:
    """The results page's short-term section: per M4 subset, our networks' paper-setting runs (ledger rows, seeds
    averaged), our statistical benchmarks (benchmarks: m4_benchmarks.csv rows) and the competition's published rows,
    each with sMAPE, MASE and OWA; the published value beside ours where the competition ran the same method."""
    subsets = {r["dataset"].removeprefix(M4_PREFIX) for r in rows} | {b["subset"] for b in benchmarks}
    if not subsets:
        return []
    lines = ["## M4 (short-term)", "", "The short-term task ([short_term.md](short_term.md)): our networks' runs, our "
             "statistical benchmarks (`python -m scripts.reproduce.m4_benchmarks --record`, each with its commit) and "
             "the competition's published numbers (M4-methods' \"Evaluation and Ranks.xlsx\"). OWA: relative to "
             "Naive2 on the same series. MSIS and ACD: of the 95% intervals of the benchmarks that the competition "
             "scored with intervals.", "",
             "| subset | method | | sMAPE | MASE | OWA | published sMAPE | published MASE | published OWA | MSIS / ACD "
             "| published MSIS / ACD | time per run |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for subset in sorted(subsets, key=_subset_order):
        cells = defaultdict(list)
        for r in rows:
            if r["dataset"] == M4_PREFIX + subset:
                cells[r["model"], r["seq_len"]].append(r)
        for (model, lookback), cell in sorted(cells.items()):
            n = sum(len(r["seeds"]) for r in cell)
            means = [sum(r[k] * len(r["seeds"]) for r in cell) / n for k in SHORT_TERM]
            time_cell = _time_per_run([(r["seconds"], len(r["seeds"]), machine_kind(r["machine"])) for r in cell
                                       if r["seconds"] is not None])
            label = "ours" if n == 1 else f"ours ({n} seeds)"
            lines.append(f"| {subset} | {model} (lookback {lookback}) | {label} | "
                         + " | ".join(_cell(v) for v in means) + " | — | — | — | — | — | " + time_cell + " |")
        for b in (b for b in benchmarks if b["subset"] == subset):
            published = m4_reference.get((b["benchmark"], subset, 0, int(b["horizon"])), {})
            lines.append(f"| {subset} | {b['benchmark']} | ours ({b['commit']}) | "
                         + " | ".join(_cell(float(b[k])) for k in SHORT_TERM) + " | "
                         + " | ".join(published.get(k) or "—" for k in SHORT_TERM) + " | "
                         + " / ".join(_cell(float(b[k])) if b.get(k) else "—" for k in INTERVALS) + " | "
                         + " / ".join(published.get(k) or "—" for k in INTERVALS) + " | — |")
        ran = {b["benchmark"] for b in benchmarks if b["subset"] == subset}
        lines += [f"| {subset} | {model} | published | — | — | — | " + " | ".join(r[k] or "—" for k in SHORT_TERM)
                  + " | — | " + " / ".join(r.get(k) or "—" for k in INTERVALS) + " | — |"
                  for (model, dataset, _, _), r in m4_reference.items() if dataset == subset and model not in ran]
    return lines + [""]


def load_m4_benchmarks(path: str) -> list:
    """The rows m4_benchmarks.py --record wrote (none: no file)."""
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _over_subsets(by_subset: dict) -> list:
    """The competition's average over the subsets (utils/m4.py: weighted_average) of each model run with one
    configuration on each of several subsets, its seeds averaged per subset."""
    configs = defaultdict(dict)  # model -> subset -> [configurations]
    for subset, groups in by_subset.items():
        for runs in groups:
            configs[runs[0]["model"]].setdefault(subset, []).append(runs)
    lines = []
    for model, subsets in sorted(configs.items()):
        if len(subsets) < 2 or any(len(groups) > 1 for groups in subsets.values()):
            continue
        per_subset = [(groups[0][0]["n_test_windows"], *(sum(r[k] for r in groups[0]) / len(groups[0])
                                                         for k in ("smape", "mase", "smape_naive2", "mase_naive2")))
                      for groups in subsets.values()]
        names = ", ".join(sorted(subsets, key=_subset_order))
        lines.append(f"| all of {names} | {model} | | | " + " | ".join(f"{v:.3f}" for v in weighted_average(per_subset))
                     + " | weighted by series |")
    return lines


def _subset_order(subset: str) -> tuple:
    order = ("Yearly", "Quarterly", "Monthly", "Weekly", "Daily", "Hourly")
    return (order.index(subset) if subset in order else len(order), subset)


PAGE_HORIZONS = {"ILI": (24, 36, 48, 60)}
STANDARD_HORIZONS = (96, 192, 336, 720)


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def setting_id(setting: dict) -> str:
    """Hash of a paper setting's configuration without its free-form tags: what a recorded run was run as."""
    return config_hash({section: values for section, values in setting.items() if section != "tag"})


def _commit(provenance: dict) -> str:
    commit = (provenance.get("git_commit") or "?")[:7]
    return commit + "+changes" if provenance.get("git_dirty") else commit


def paper_rows(groups: dict, settings: dict) -> list:
    """Ledger rows (one per run) of the runs that are their paper's setting."""
    rows = []
    for runs in groups.values():
        m = runs[0]
        setting = paper_setting(settings, m)
        if paper_mismatch(m, setting) is not None:
            continue
        for r in runs:
            provenance = r.get("provenance", {})
            rows.append({"model": r["model"], "dataset": r["dataset"], "seq_len": r["seq_len"],
                         "horizon": r["test_pred_len"], "test": r["test"], "seeds": [r["seed"]], "mse": r["mse"],
                         "mae": r["mae"], "mse_min": r["mse"], "mse_max": r["mse"], "seconds": r.get("run_seconds"),
                         "setting_id": setting_id(setting), "commit": _commit(provenance),
                         "machine": provenance.get("device") or provenance.get("host", "?"),
                         "source": f"{r['setting']}/{r['test']}", "protocol": run_protocol(r),
                         **{k: r.get(k) if is_short_term(r) else None for k in SHORT_TERM}})
    return rows


def _cell_key(row: dict) -> tuple:
    return row["model"], row["dataset"], row["seq_len"], row["horizon"], row["test"], row["setting_id"], row["protocol"]


def load_ledger(path: str) -> list:
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r.update(seq_len=int(r["seq_len"]), horizon=int(r["horizon"]), seeds=[int(s) for s in r["seeds"].split()],
                 seconds=float(r["seconds"]) if r["seconds"] else None, protocol=r.get("protocol") or "tslib",
                 **{k: float(r[k]) for k in ("mse", "mae", "mse_min", "mse_max")},
                 **{k: float(r[k]) if r.get(k) else None for k in SHORT_TERM})  # empty: a long-term run
    return rows


def record(path: str, rows: list) -> list:
    """Append to the ledger the rows whose seeds its cell does not hold yet; returns the rows appended."""
    ledger = load_ledger(path)
    held = {(_cell_key(r), seed) for r in ledger for seed in r["seeds"]}
    added = [r for r in rows if (_cell_key(r), r["seeds"][0]) not in held]
    if added:
        order = lambda r: (ORDER.get(r["dataset"], 99), r["dataset"], r["model"], r["horizon"], r["seeds"])

        def write(f):
            out = csv.DictWriter(f, LEDGER_FIELDS, lineterminator="\n")
            out.writeheader()
            for r in sorted(ledger + added, key=order):
                out.writerow({**r, "seeds": " ".join(map(str, r["seeds"])),
                              "seconds": "" if r["seconds"] is None else _seconds(r["seconds"]),
                              **{k: f"{r[k]:.6g}" for k in ("mse", "mae", "mse_min", "mse_max")},
                              **{k: "" if r.get(k) is None else f"{r[k]:.6g}" for k in SHORT_TERM}})
        write_atomic(path, write, "w")
    return added


def _seconds(seconds: float) -> str:
    """Whole seconds, or one significant digit below one (a linear model's run can take a fraction of a second)."""
    return f"{seconds:.0f}" if seconds >= 0.95 else f"{seconds:.1g}"


def _time_per_run(timed: list) -> str:
    """The mean seconds of [(seconds, seeds, machine kind)], CPU runs first, each GPU's apart and named."""
    by_kind = defaultdict(list)
    for seconds, seeds, kind in timed:
        by_kind[kind].append((seconds, seeds))
    parts = [f"{_seconds(sum(t * k for t, k in runs) / sum(k for _, k in runs))} s"
             + ("" if kind == "CPU" else f" ({kind})")
             for kind, runs in sorted(by_kind.items(), key=lambda item: item[0] != "CPU")]
    return "; ".join(parts) or "—"


def results_page(rows: list, references: dict, settings: dict, tolerance: float = 0.02, ledger: str | None = None,
                 m4_reference: dict | None = None, m4_benchmarks: list | None = None) -> tuple:
    """(the results page (docs/results.md) from ledger rows of paper-setting runs, with the paper's numbers;
    the rows listed apart, their setting no longer the scripts'). The short-term (M4) runs get a section of their
    own, beside our statistical benchmarks (m4_benchmarks.py --record) and the competition's published rows. A
    protocol other than TSLib's has sections of its own (ETTh1 (tfb)), compared with its own published numbers
    (references: load_long_term_references)."""
    current = {key: setting_id(setting) for key, setting in settings.items()}
    by_cell, stale, short_term = defaultdict(list), [], []
    for r in rows:
        if current.get((r["model"], r["dataset"], r["horizon"], r["protocol"])) != r["setting_id"]:
            stale.append(r)
        elif r["dataset"].startswith(M4_PREFIX):
            short_term.append(r)
        else:
            by_cell[r["dataset"], r["protocol"], r["model"], r["seq_len"], r["horizon"]].append(r)
    found = defaultdict(dict)  # (dataset label, model, lookback) -> horizon -> cell
    for (dataset, protocol, model, lookback, horizon), cell_rows in by_cell.items():
        n = sum(len(r["seeds"]) for r in cell_rows)
        paper = references.get(protocol, {}).get((model, dataset, lookback, horizon))
        found[dataset_label(dataset, protocol), model, lookback][horizon] = {
            "mse": sum(r["mse"] * len(r["seeds"]) for r in cell_rows) / n,
            "mae": sum(r["mae"] * len(r["seeds"]) for r in cell_rows) / n, "runs": n,
            "paper_mse": _published(paper, "mse"), "paper_mae": _published(paper, "mae"),
            "seconds": [(r["seconds"], len(r["seeds"]), machine_kind(r["machine"])) for r in cell_rows
                        if r["seconds"] is not None],
            "mse_range": (min(r["mse_min"] for r in cell_rows), max(r["mse_max"] for r in cell_rows))}
    machines = {r["machine"] for cell_rows in [*by_cell.values(), short_term] for r in cell_rows}
    origin = (f"the runs recorded in `{ledger}` (each with its commit and machine)" if ledger else
              "the runs of the paper-setting scripts (`scripts/long_term_forecast/`)")
    lines = ["# Results", "", f"Generated by `python -m analysis.report RESULTS_DIR --page docs/results.md"
             f"{f' --ledger {ledger}' if ledger else ''}` from {origin}; how to run them: "
             "[reproducing.md](reproducing.md). Each model has a row of ours (the mean over its seeds; the seed "
             "count is given where more than one), a row of the paper's numbers and one of the gap, (ours − paper) "
             "/ paper. `avg`: the mean over the horizons, as papers print it, where all were run. Bold: the lowest "
             f"of ours in the column; ✗: worse than the paper's by more than {tolerance:.0%}, each investigated in "
             "reproducing.md. Time: one run's training and evaluation (all its epochs), averaged over the model's "
             "runs on CPUs and, apart, over those on each GPU named.", ""]
    for dataset in sorted({d for d, _, _ in found}, key=lambda d: (ORDER.get(d.split(" ")[0], 99), d)):
        rows = sorted((model, lookback) for d, model, lookback in found if d == dataset)
        horizons = PAGE_HORIZONS.get(dataset.split(" ")[0], STANDARD_HORIZONS)
        cells = {row: found[(dataset, *row)] for row in rows}
        for row in rows:  # the average over the horizons, where every one was run
            complete = all(h in cells[row] for h in horizons)
            cells[row]["avg"] = {k: _mean([cells[row][h][k] for h in horizons]) if complete else None
                                 for k in ("mse", "mae", "paper_mse", "paper_mae")}
        columns = [*horizons, "avg"]
        best = {(c, k): min((_cell(cells[r][c][k]) for r in rows if c in cells[r] and cells[r][c][k] is not None),
                            default=None) for c in columns for k in ("mse", "mae")}  # as printed: ties share it
        lines += [f"## {dataset}", "", "| model | lookback | | " + " | ".join(f"{c} MSE | {c} MAE" for c in columns)
                  + " | time per run |", "|---|---|---|" + "---|---|" * len(columns) + "---|"]
        for model, lookback in rows:
            row = cells[model, lookback]
            ours, paper, gaps = [], [], []
            for c in columns:
                cell = row.get(c, {})
                for k in ("mse", "mae"):
                    value = cell.get(k)
                    text = _cell(value)
                    if value is not None and text == best[c, k]:
                        text = f"**{text}**"
                    gap = _gap(value, cell.get(f"paper_{k}")) if value is not None else None
                    if gap is not None and gap > tolerance:
                        text += " ✗"
                    ours.append(text)
                    paper.append(_cell(cell.get(f"paper_{k}")))
                    gaps.append(_percent(gap))
            seeds = max(cell["runs"] for h, cell in row.items() if h != "avg")
            label = "ours" if seeds == 1 else f"ours ({seeds} seeds at most)"
            time_cell = _time_per_run([t for h, cell in row.items() if h != "avg" for t in cell["seconds"]])
            lines.append(f"| {model} | {lookback} | {label} | " + " | ".join(ours) + f" | {time_cell} |")
            if any(v != "—" for v in paper):
                lines.append("| | | paper | " + " | ".join(paper) + " | |")
            if any(v != "—" for v in gaps):
                lines.append("| | | gap | " + " | ".join(gaps) + " | |")
        spreads = [f"{model} {h}: {row[h]['runs']} seeds, {row[h]['mse_range'][0]:.3f}–{row[h]['mse_range'][1]:.3f}"
                   for (model, _), row in cells.items() for h in horizons if h in row and row[h]["runs"] > 1]
        lines += ["", "MSE range over seeds: " + "; ".join(spreads) + "."] if spreads else []
        lines.append("")
    lines += m4_section(short_term, m4_reference or {}, m4_benchmarks or [])
    lines.append("Machines: " + "; ".join(sorted(machines)) + "." if machines else "No paper-setting runs yet.")
    if stale:  # recorded results stay in sight, apart from the table they no longer belong to
        lines += ["", "Recorded under an earlier paper setting (its script has changed since; not in the tables): " +
                  "; ".join(f"{r['model']} {r['dataset']} {r['test']}: {r['mse']:.3f} / {r['mae']:.3f} (seeds "
                            f"{' '.join(map(str, r['seeds']))}, commit {r['commit']})" for r in stale) + "."]
    return "\n".join(lines) + "\n", stale


def main(argv=None) -> None:
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results_dir", type=cli.existing_folder)
    parser.add_argument("--reference", default=DEFAULT_REFERENCE, type=cli.existing_file,
                        help="CSV of published numbers")
    parser.add_argument("--settings", default=DEFAULT_SETTINGS, type=cli.existing_file,
                        help="JSON of the paper-setting configurations")
    parser.add_argument("--out", default=None, help="markdown file to write (default: RESULTS_DIR/report.md)")
    parser.add_argument("--tolerance", type=cli.at_least(0.0, float), default=0.02,
                        help="relative MSE gap that marks a miss")
    parser.add_argument("--page", default=None, help="also write the results page (docs/results.md) here")
    parser.add_argument("--ledger", default=None,
                        help="CSV record of the page's runs (scripts/reproduce/runs.csv): RESULTS_DIR's paper-setting "
                             "runs are added to it and the page is written from it")
    args = parser.parse_args(argv)
    groups, skipped = load_runs(args.results_dir)
    if not groups and not args.ledger:
        raise no_runs(args.results_dir, skipped)
    settings = load_settings(args.settings)
    rows = paper_rows(groups, settings)
    if args.ledger:
        added = record(args.ledger, rows)
        sys.stdout.write(f"{len(added)} runs added to {args.ledger}" +
                         "".join(f"\n- {r['source']} ({r['commit']})" for r in added) + "\n")
        rows = load_ledger(args.ledger)
    if args.page:
        page, stale = results_page(rows, load_long_term_references(args.reference), settings, args.tolerance,
                                   args.ledger,
                                   load_reference(args.reference, "m4"), load_m4_benchmarks(DEFAULT_M4_BENCHMARKS))
        write_atomic(args.page, lambda f: f.write(page), "w")
        if stale:
            sys.stdout.write(f"left out of {args.page}'s tables: {len(stale)} recorded cells whose paper setting the "
                             "scripts no longer hold:" + "".join(f"\n- {r['model']} {r['dataset']} {r['test']} seeds "
                                                      f"{' '.join(map(str, r['seeds']))} ({r['commit']})"
                                                      for r in stale) + "\n")
    if not groups:
        return
    table, compared, misses, notes, unpublished = build_table(groups, load_long_term_references(args.reference),
                                                              settings, args.tolerance)
    n_runs = sum(map(len, groups.values()))
    text = (f"{table}\n\n{len(groups)} configurations x tests from {n_runs} runs; {compared} compared with the paper, "
            f"{misses} worse than the paper's MSE by more than {args.tolerance:.0%} (✗); {len(notes)} not at the "
            f"paper's setting (below), {unpublished} with no paper number for their model, dataset, lookback and "
            "horizon. Gap = (ours - paper) / paper; a row averages the seeds of one configuration.\n")
    short_term = short_term_table(groups, load_reference(args.reference, "m4"))
    if short_term:
        text += f"\nShort-term (M4) runs, each subset's with the competition's published rows:\n\n{short_term}\n"
    chosen = lookback_choice_table(groups)
    if chosen:
        text += f"\nThe lookback each protocol that searches it keeps, the lowest validation loss:\n\n{chosen}\n"
    zero_shot = zero_shot_table(groups, load_zero_shot_reference(args.reference), args.tolerance)
    if zero_shot:
        text += f"\nZero-shot tests of published checkpoints, with the published zero-shot numbers:\n\n{zero_shot}\n"
    if notes or skipped:
        text += "\nNot compared with the paper or left out:\n" + "".join(f"- {n}\n" for n in notes) \
            + "".join(f"- {path}: {reason}\n" for path, reason in skipped)
    out = args.out or os.path.join(args.results_dir, "report.md")
    write_atomic(out, lambda f: f.write(text), "w")
    sys.stdout.write(text)


if __name__ == "__main__":
    cli.run(main)
