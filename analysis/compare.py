"""Is one model really better than another? Significance from the runs of a results folder.

    python -m analysis.compare RESULTS_DIR A B --data ETTh1 --horizon 96 [--metric mse] [--alpha 0.05]
    python -m analysis.compare RESULTS_DIR --ranks [A B C ...] [--metric mse] [--plot cd.png]

A and B are models (or configuration ids, or their first characters). The pair comparison reads every seed's
per-window errors (window_errors.npz beside metrics.json) on the same test split: each model's loss on a
window is its mean over that model's seeds. It prints each model's metric as mean ± std over seeds, the
Diebold-Mariano test of the per-window loss difference (Harvey-Leybourne-Newbold correction, autocovariances
up to lag horizon-1 because stride-1 windows overlap by horizon-1 steps) and a circular block-bootstrap
interval of the mean difference (blocks of 4 x horizon windows), then a verdict: "better", "worse" or "no
significant difference" for A against B at --alpha, significant only when both agree (analysis/stats.py says
why).

--ranks ranks the models on every (dataset, test) that all of them have run (the metric's mean over seeds),
prints their average ranks, the Friedman test (and Iman-Davenport F), the Nemenyi critical difference and the
groups of models it cannot tell apart; --plot draws the critical-difference diagram as papers print it.

A model with several configurations on one test is taken at its paper setting (the results page's runs)
when exactly one of them is; otherwise name the configuration id.
"""
import argparse
import os
import statistics
import sys
from collections import defaultdict

import numpy as np

from analysis import stats
from analysis.report import DEFAULT_SETTINGS, ORDER, load_runs, load_settings, no_runs, paper_mismatch, paper_setting
from utils import cli
from utils.errors import ConfigError
from utils.metrics import reported_names
from utils.outputs import WINDOW_ERRORS


class CompareError(ConfigError):
    """A comparison the runs cannot support: the message says which runs and why."""


def _matches(run: dict, name: str) -> bool:
    return run["model"] == name or run["config_id"].startswith(name)


def pick(groups: dict, settings: dict, name: str, dataset: str, test: str) -> list:
    """The runs (one per seed) of the one configuration of `name` on (dataset, test)."""
    found = [runs for runs in groups.values()
             if _matches(runs[0], name) and runs[0]["dataset"] == dataset and runs[0]["test"] == test]
    if len(found) > 1:
        paper = [runs for runs in found if paper_mismatch(runs[0], paper_setting(settings, runs[0])) is None]
        if len(paper) == 1:
            return paper[0]
        ids = ", ".join(sorted(runs[0]["config_id"] for runs in found))
        raise CompareError(f"{name} has {len(found)} configurations on {dataset} {test} ({ids}): name one by its id")
    if not found:
        raise CompareError(f"no run of {name} on {dataset} {test}")
    return found[0]


def _window_losses(runs: list, metric: str) -> np.ndarray:
    """(seeds, windows) of the metric's per-window values, read from each run's window_errors.npz."""
    rows = []
    for run in runs:
        path = os.path.join(run["folder"], WINDOW_ERRORS)
        if not os.path.isfile(path):
            raise CompareError(f"{path} is missing: this run was tested before per-window errors were saved; "
                               "test it again (--is_training 0)")
        with np.load(path) as saved:
            if metric not in saved:
                raise CompareError(f"{path} has no {metric} (it has {', '.join(saved.files)})")
            rows.append(saved[metric].astype(np.float64))
    return np.stack(rows)


def _same_split(a: dict, b: dict) -> None:
    """Window i must be the same forecast target in both runs: same data, mode, test and number of windows."""
    for what, value in (("data", lambda r: r["config"]["data"]), ("features", lambda r: r["features"]),
                        ("test", lambda r: r["test"]), ("test windows", lambda r: r["n_test_windows"])):
        if value(a) != value(b):
            raise CompareError(f"the runs are not scored on the same windows: {what} {value(a)} vs {value(b)}")


def _seed_summary(runs: list, metric: str) -> str:
    values = [r[metric] for r in runs]
    spread = f" ± {statistics.stdev(values):.4f} (range {min(values):.4f}–{max(values):.4f})" if len(values) > 1 \
        else ""
    return f"{statistics.fmean(values):.4f}{spread} over {len(values)} seed{'s' * (len(values) > 1)}"


def compare_pair(groups: dict, settings: dict, a: str, b: str, dataset: str, horizon: int, metric: str = "mse",
                 alpha: float = 0.05, test: str | None = None) -> tuple[str, str]:
    """(verdict for A against B, the report's text)."""
    test = test or f"tp{horizon}"
    runs_a, runs_b = pick(groups, settings, a, dataset, test), pick(groups, settings, b, dataset, test)
    _same_split(runs_a[0], runs_b[0])
    loss_a, loss_b = _window_losses(runs_a, metric).mean(0), _window_losses(runs_b, metric).mean(0)
    dm = stats.diebold_mariano(loss_a, loss_b, horizon)
    block = min(4 * horizon, len(loss_a))
    ci = stats.block_bootstrap_ci(loss_a, loss_b, block=block, level=1 - alpha)
    result = stats.verdict(dm, ci, alpha)
    label = {r[0]["config_id"]: f"{r[0]['model']} ({r[0]['config_id']}, lookback {r[0]['seq_len']})"
             for r in (runs_a, runs_b)}
    lines = [f"{dataset}, test {test}: {metric} over {len(loss_a)} windows",
             f"A {label[runs_a[0]['config_id']]}: {_seed_summary(runs_a, metric)}",
             f"B {label[runs_b[0]['config_id']]}: {_seed_summary(runs_b, metric)}",
             f"A - B per window (mean over each model's seeds): {dm.mean_diff:+.5f}",
             f"Diebold-Mariano (HLN, {dm.lags} lags, {dm.kernel} kernel): statistic {dm.statistic:.3f}, "
             f"p {dm.p_value:.4g}",
             f"{1 - alpha:.0%} block bootstrap interval (blocks of {block} windows): [{ci[0]:+.5f}, {ci[1]:+.5f}]",
             f"verdict at alpha {alpha:g}: A is {result}" if result != "no significant difference"
             else f"verdict at alpha {alpha:g}: no significant difference"]
    return result, "\n".join(lines) + "\n"


def rank_models(groups: dict, settings: dict, models: list | None, metric: str = "mse", alpha: float = 0.05,
                plot: str | None = None) -> dict:
    """Average ranks, Friedman and Nemenyi over every (dataset, test) all models have run."""
    models = models or sorted({runs[0]["model"] for runs in groups.values()})
    if len(models) < 2:
        raise CompareError(f"ranking needs at least 2 models, got {models}")
    problems = defaultdict(dict)  # (dataset, test) -> model -> mean of the metric over seeds
    tests = sorted({(runs[0]["dataset"], runs[0]["test"], runs[0]["test_pred_len"]) for runs in groups.values()},
                   key=lambda t: (ORDER.get(t[0], 99), t[0], t[2], t[1]))
    skipped = []
    for dataset, test, _ in tests:
        missing = [m for m in models if not any(_matches(r[0], m) and r[0]["dataset"] == dataset
                                                and r[0]["test"] == test for r in groups.values())]
        if missing:
            skipped.append(f"{dataset} {test} (no run of {', '.join(missing)})")
            continue
        for m in models:
            problems[dataset, test][m] = statistics.fmean(r[metric] for r in pick(groups, settings, m, dataset, test))
    if not problems:
        raise CompareError(f"no dataset and test that every one of {', '.join(models)} has run")
    keys = list(problems)
    scores = np.array([[problems[p][m] for m in models] for p in keys])
    ranks = stats.average_ranks(scores)
    cd = stats.nemenyi_cd(len(models), len(keys), alpha)
    out = {"models": models, "problems": keys, "scores": scores, "ranks": ranks, "cd": cd, "skipped": skipped,
           "cliques": stats.cliques(models, ranks, cd),
           "friedman": stats.friedman(scores) if len(keys) >= 2 else None}
    if plot:
        stats.cd_diagram(models, ranks, cd, plot, title=f"{metric}, {len(keys)} datasets x horizons")
    return out


def ranks_text(result: dict, metric: str, alpha: float) -> str:
    order = np.argsort(result["ranks"], kind="stable")
    lines = [f"{metric} ranks over {len(result['problems'])} datasets x tests: "
             + ", ".join(f"{d} {t}" for d, t in result["problems"]), "", "| model | average rank |", "|---|---|"]
    lines += [f"| {result['models'][i]} | {result['ranks'][i]:.2f} |" for i in order]
    f = result["friedman"]
    lines.append("")
    lines.append("Friedman: one problem only, no test" if f is None else
                 f"Friedman chi2 {f.chi2:.3f} (p {f.p_value:.4g}); Iman-Davenport F {f.iman_davenport:.3f} "
                 f"(p {f.iman_davenport_p:.4g})")
    groups = "; ".join(", ".join(g) for g in result["cliques"]) or "none: every pair differs"
    lines.append(f"Nemenyi critical difference at alpha {alpha:g}: {result['cd']:.3f}; not told apart: {groups}")
    if result["skipped"]:
        lines.append("Left out: " + "; ".join(result["skipped"]))
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results_dir", type=cli.existing_folder)
    parser.add_argument("models", nargs="*", help="A B: the two models (or configuration ids) to compare; with "
                        "--ranks the models to rank (default: every model in RESULTS_DIR)")
    parser.add_argument("--data", help="dataset of the pair comparison (its --data name)")
    parser.add_argument("--horizon", type=cli.at_least(1), help="tested horizon of the pair comparison")
    parser.add_argument("--test", help="the test's name when not tp<horizon> (e.g. with --test_drop_last)")
    parser.add_argument("--metric", default="mse", help="the metric compared (default mse; <metric>_original: on the "
                        "original scale)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    parser.add_argument("--ranks", action="store_true", help="rank models over every dataset and horizon")
    parser.add_argument("--plot", help="with --ranks: write the critical-difference diagram (PNG) here")
    parser.add_argument("--settings", default=DEFAULT_SETTINGS, type=cli.existing_file,
                        help="JSON of the paper-setting configurations")
    args = parser.parse_intermixed_args(argv)  # models may follow the options
    if not 0 < args.alpha < 1:
        parser.error(f"--alpha must lie in (0, 1), got {args.alpha}")
    if not args.ranks and (len(args.models) != 2 or args.data is None or args.horizon is None):
        parser.error("a pair comparison needs two models, --data and --horizon (or use --ranks)")
    if args.plot and not args.ranks:
        parser.error("--plot draws the ranks' diagram: add --ranks")
    if args.metric not in reported_names():
        parser.error(f"--metric {args.metric}: the metrics are {', '.join(reported_names())}")
    groups, skipped = load_runs(args.results_dir)
    if not groups:
        raise no_runs(args.results_dir, skipped)
    settings = load_settings(args.settings)
    try:
        if args.ranks:
            text = ranks_text(rank_models(groups, settings, args.models or None, args.metric, args.alpha, args.plot),
                              args.metric, args.alpha)
        else:
            text = compare_pair(groups, settings, *args.models, args.data, args.horizon, args.metric, args.alpha,
                                args.test)[1]
    except ValueError as e:  # analysis.stats on runs it cannot compare (too few windows, non-finite losses)
        raise ConfigError(str(e)) from None
    sys.stdout.write(text)


if __name__ == "__main__":
    cli.run(main)
