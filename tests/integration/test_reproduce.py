"""Paper reproduction tooling: the report against published numbers, plots, the drop-last emulation."""
import copy
import json
import os
import shutil

import pytest

import run
from analysis import report
from tests.conftest import REPO, run_dirs
from utils.errors import ConfigError
from utils.fingerprints import config_hash


def _paper_config(model, dataset, horizon):
    for s in json.load(open(report.DEFAULT_SETTINGS)):
        if (s["model"], s["dataset"], s["horizon"]) == (model, dataset, horizon):
            return copy.deepcopy(s["config"])
    raise KeyError((model, dataset, horizon))


def _run(root, config, seed, mse, mae, test=None, world_size=1, epoch_seconds=None):
    """A metrics.json as a run of this configuration and seed writes it; returns its path."""
    config = copy.deepcopy(config)
    config["training"]["seed"] = seed
    config["training"]["world_size"] = world_size
    config["data"]["fingerprint"] = "123-abc"
    task, training = config["task"], config["training"]
    horizon = int((test or f"tp{task['output_token_len']}")[2:].split("_")[0])
    without_seed = {**config, "training": {k: v for k, v in training.items() if k != "seed"}}
    config_id = config_hash(without_seed)
    setting = f"{config['model']['model']}_{config_id}_s{seed}"
    test = test or f"tp{horizon}"
    m = {"setting": setting, "test": test, "config_id": config_id, "seed": seed, "config": config, "mse": mse,
         "mae": mae, "model": config["model"]["model"], "dataset": config["tag"]["model_id"], "seq_len": task["seq_len"],
         "test_pred_len": horizon, "world_size": world_size,
         "global_batch_size": training["batch_size"] * training["accum_steps"] * world_size,
         "effective_lr": training["learning_rate"] * world_size,
         "provenance": {"device": "Some CPU, 1 threads"}}
    os.makedirs(root / setting / test)
    (root / setting / test / "metrics.json").write_text(json.dumps(m))
    if epoch_seconds:
        (root / setting / "history.csv").write_text("epoch,train_seconds,eval_seconds\n" + "".join(
            f"{i + 1},{train},{evaluate}\n" for i, (train, evaluate) in enumerate(epoch_seconds)))
    return root / setting / test / "metrics.json"


def _rows(text):
    return [line for line in text.splitlines() if line.startswith("| ETTh1")]


def test_report_averages_only_the_seeds_of_one_configuration_and_compares_only_the_papers_setting(tmp_path):
    paper = _paper_config("dlinear", "ETTh1", 96)
    _run(tmp_path, paper, 2021, 0.370, 0.395)
    _run(tmp_path, paper, 2022, 0.380, 0.405)
    smoke = copy.deepcopy(paper)
    smoke["training"]["train_epochs"] = 1     # a 1-epoch smoke run: its own row, never averaged in
    _run(tmp_path, smoke, 2021, 0.500, 0.500)
    trained_at_96 = _paper_config("dlinear", "ETTh1", 96)  # rolled out to 192: not the paper's model at 192
    _run(tmp_path, trained_at_96, 2021, 0.450, 0.450, test="tp192")
    _run(tmp_path, paper, 2023, 0.400, 0.420, world_size=4)  # four processes: a global batch of 128
    report.main([str(tmp_path)])
    text = (tmp_path / "report.md").read_text()
    rows = _rows(text)
    paper_row = next(r for r in rows if "| 2: 0.370–0.380 |" in r)
    assert "| 0.375 | 0.375 | 0.0% |" in paper_row                   # the mean of the two paper-setting seeds
    smoke_row = next(r for r in rows if "| 0.500 |" in r)
    assert "| 1 | 0.500 | — | — |" in smoke_row                         # shown, but not compared
    assert "| 1 | 0.450 | — | — |" in next(r for r in rows if "| 192 |" in r)
    assert "5 runs; 1 compared with the paper" in text
    assert "3 not at the paper's setting (below), 0 with no paper number" in text
    assert "train_epochs 1 (paper 10)" in text and "output_token_len 96 (paper 192)" in text
    assert "global batch 128 on 4 processes (paper 32)" in text


def test_report_marks_misses_counts_rows_without_a_paper_number_and_leaves_out_runs_it_cannot_read(tmp_path):
    _run(tmp_path, _paper_config("dlinear", "ETTh1", 192), 2021, 0.440, 0.43)
    _run(tmp_path, _paper_config("ttm", "ETTh1", 96), 2021, 0.400, 0.41)  # no paper trains TTM on ETTh1 alone
    os.makedirs(tmp_path / "old")
    (tmp_path / "old" / "metrics.json").write_text(json.dumps({"mse": 1.0, "model": "dlinear"}))
    os.makedirs(tmp_path / "cut")
    (tmp_path / "cut" / "metrics.json").write_text('{"config_id": ')  # a file cut short
    report.main([str(tmp_path)])
    text = (tmp_path / "report.md").read_text()
    assert "| 0.440 | 0.405 | **+8.6%** ✗ |" in next(r for r in _rows(text) if "| 192 |" in r)
    assert "1 compared with the paper, 1 worse than the paper's MSE by more than 2% (✗); 0 not at the paper's " \
        "setting (below), 1 with no paper number" in text
    assert "old/metrics.json: written before run identities" in text
    assert "cut/metrics.json: not readable as JSON" in text


def test_results_page_prints_paper_setting_runs_beside_the_paper_with_averages_best_cells_and_times(tmp_path):
    paper_mse = {96: 0.375, 192: 0.405, 336: 0.439, 720: 0.472}
    for horizon, mse in paper_mse.items():
        _run(tmp_path, _paper_config("dlinear", "ETTh1", horizon), 2021, mse + 0.001, 0.4, epoch_seconds=[(2, 1)] * 3)
    _run(tmp_path, _paper_config("dlinear", "ETTh1", 96), 2022, 0.378, 0.4, epoch_seconds=[(2, 1)])
    _run(tmp_path, _paper_config("nlinear", "ETTh1", 96), 2021, 0.36, 0.5)  # better MSE, worse MAE; no history
    smoke = _paper_config("nlinear", "ETTh1", 192)
    smoke["training"]["train_epochs"] = 1  # not the paper's setting: not on the page
    _run(tmp_path, smoke, 2021, 0.1, 0.1)
    report.main([str(tmp_path), "--page", str(tmp_path / "results.md")])
    page = (tmp_path / "results.md").read_text()
    dlinear = next(line for line in page.splitlines() if line.startswith("| dlinear |"))
    cells = [c.strip() for c in dlinear.strip("|").split("|")]
    assert cells[:3] == ["dlinear", "336", "ours (2 seeds at most)"]
    assert cells[3:5] == ["0.377", "**0.400**"]  # seeds averaged; nlinear has the lower MSE at 96
    assert cells[11:13] == [f"**{(sum(paper_mse.values()) + 0.004 + 0.001) / 4:.3f}**", "**0.400**"]
    assert cells[13] == "8 s"  # (4 runs x 3 epochs x 3 s + 1 run x 3 s) / 5 runs
    paper_row = page.splitlines()[page.splitlines().index(dlinear.rstrip()) + 1]
    assert paper_row.startswith("| | | paper | 0.375 | 0.399 | 0.405 |")
    gap_row = page.splitlines()[page.splitlines().index(dlinear.rstrip()) + 2]
    assert gap_row.startswith("| | | gap | +0.5% | +0.3% | +0.2% |")  # (ours - paper) / paper, MSE and MAE
    assert [report._percent(g) for g in (-0.0004, 0.0004, -0.0123, None)] == ["0.0%", "0.0%", "−1.2%", "—"]
    nlinear = next(line for line in page.splitlines() if line.startswith("| nlinear |"))
    assert "| **0.360** | 0.500 ✗ | — | — |" in nlinear and nlinear.endswith("| — |")
    assert "0.100" not in page and "Machines:" in page
    assert "MSE range over seeds: dlinear 96: 2 seeds, 0.376–0.378." in page  # nlinear's one seed: no range


def test_ledger_keeps_the_page_when_the_run_folders_are_gone(tmp_path, capsys):
    results, ledger = tmp_path / "results", tmp_path / "runs.csv"
    paper = _paper_config("dlinear", "ETTh1", 96)
    _run(results, paper, 2021, 0.370, 0.395, epoch_seconds=[(2, 1)])
    _run(results, paper, 2022, 0.380, 0.405, epoch_seconds=[(2, 1)])
    smoke = copy.deepcopy(paper)
    smoke["training"]["train_epochs"] = 1  # not the paper's setting: never recorded
    _run(results, smoke, 2021, 0.5, 0.5)
    report.main([str(results), "--ledger", str(ledger), "--page", str(tmp_path / "first.md")])
    assert "2 runs added" in capsys.readouterr().out
    assert [(r["seeds"], r["mse"], r["seconds"]) for r in report.load_ledger(ledger)] == \
        [([2021], 0.37, 3.0), ([2022], 0.38, 3.0)]
    report.main([str(results), "--ledger", str(ledger)])  # recorded once, however often reported
    assert "0 runs added" in capsys.readouterr().out and len(report.load_ledger(ledger)) == 2
    empty = tmp_path / "lost"
    os.makedirs(empty)
    report.main([str(empty), "--ledger", str(ledger), "--page", str(tmp_path / "again.md")])
    assert (tmp_path / "again.md").read_text() == (tmp_path / "first.md").read_text()
    _run(tmp_path / "later", paper, 2023, 0.360, 0.385)  # another stop's seed joins the recorded ones
    report.main([str(tmp_path / "later"), "--ledger", str(ledger), "--page", str(tmp_path / "page.md")])
    dlinear = next(line for line in (tmp_path / "page.md").read_text().splitlines() if line.startswith("| dlinear"))
    assert "| ours (3 seeds at most) | **0.370** | **0.395** |" in dlinear and dlinear.endswith("| 3 s |")


def test_ledger_rows_of_a_setting_the_scripts_no_longer_hold_are_listed_apart_from_the_tables(tmp_path, capsys):
    ledger = tmp_path / "runs.csv"
    _run(tmp_path / "results", _paper_config("dlinear", "ETTh1", 96), 2021, 0.370, 0.395)
    report.main([str(tmp_path / "results"), "--ledger", str(ledger)])
    rows = report.load_ledger(ledger)
    rows[0]["setting_id"] = "0123456789"  # as if the paper script had changed since the run
    page, stale = report.results_page(rows, {}, report.load_settings(report.DEFAULT_SETTINGS))
    assert "| dlinear |" not in page and stale == rows
    assert page.endswith("not in the tables): dlinear ETTh1 tp96: 0.370 / 0.395 (seeds 2021, commit ?).\n")


def test_shipped_results_page_is_the_ledger_at_the_current_paper_settings(tmp_path, capsys):
    """docs/results.md is what scripts/reproduce/runs.csv gives at the current paper settings."""
    ledger = tmp_path / "runs.csv"
    ledger.write_bytes(open(report.DEFAULT_LEDGER, "rb").read())
    os.makedirs(tmp_path / "none")
    report.main([str(tmp_path / "none"), "--ledger", str(ledger), "--page", str(tmp_path / "results.md")])
    shipped = open(os.path.join(REPO, "docs", "results.md")).read()
    assert (tmp_path / "results.md").read_text() == shipped.replace("scripts/reproduce/runs.csv", str(ledger))


def test_report_needs_some_results(tmp_path):
    with pytest.raises(ConfigError, match="no metrics.json"):
        report.main([str(tmp_path)])


def test_visualize_writes_forecast_and_loss_plots(tiny_args, tmp_path):
    run.main(tiny_args + ["--visualize", "--plot_channel", "0", "--train_epochs", "1"])
    (run_dir,) = run_dirs(tmp_path / "results")
    forecasts = sorted(os.listdir(run_dir / "tp16"))
    assert [n for n in forecasts if n.startswith("forecast_")] == [f"forecast_{i}.png" for i in range(4)]
    pngs = [run_dir / "loss_curves.png", *(run_dir / "tp16" / n for n in forecasts if n.endswith(".png"))]
    assert all(path.read_bytes()[:4] == b"\x89PNG" for path in pngs)


def test_test_drop_last_scores_only_whole_batches(tiny_args):
    every = run.main(tiny_args + ["--train_epochs", "1"])[0]["metrics"]
    dropped = run.main(tiny_args + ["--train_epochs", "1", "--is_training", "0", "--test_drop_last"])[0]["metrics"]
    assert every["n_test_windows"] == 105 and dropped["n_test_windows"] == 96  # 6 batches of 16
    assert dropped["mse"] != every["mse"]


def _short_term_run(root, config, seed, smape, mase, owa):
    """A short-term (M4) run's metrics.json: its measures beside the long-term ones every test writes."""
    path = _run(root, config, seed, 1.0, 1.0, epoch_seconds=[(4, 1)])
    m = json.loads(path.read_text())
    m.update(dataset=config["tag"]["model_id"].replace("_", "-"), smape=smape, mase=mase, owa=owa, smape_naive2=20.0,
             mase_naive2=2.0, n_test_windows=100)
    path.write_text(json.dumps(m))


def test_short_term_runs_have_their_own_table_and_page_section_beside_the_competitions_rows(tmp_path, capsys):
    results, ledger = tmp_path / "results", tmp_path / "runs.csv"
    paper = _paper_config("nbeats", "M4-Hourly", 48)
    _short_term_run(results, paper, 2021, 10.0, 0.80, 0.40)
    _short_term_run(results, paper, 2022, 12.0, 1.00, 0.50)
    short = copy.deepcopy(paper)
    short["training"]["train_steps"] = 1500  # a CPU budget: not the paper's setting, in the report, not on the page
    _short_term_run(results / "short", short, 2021, 20.0, 2.0, 1.0)
    _run(results, _paper_config("dlinear", "ETTh1", 96), 2021, 0.370, 0.395)
    _short_term_run(results / "weekly", _paper_config("nbeats", "M4-Weekly", 13), 2021, 6.0, 2.0, 0.4)
    benchmarks = tmp_path / "m4_benchmarks.csv"
    benchmarks.write_text("subset,benchmark,horizon,smape,mase,owa,commit,machine\n"
                          "Hourly,theta,48,18.137,2.454,1.006,abc1234,Some CPU\n")
    report.main([str(results)])
    capsys.readouterr()
    text = (results / "report.md").read_text()
    assert "| Hourly | nbeats | 96 | 2 | 11.000 | 0.900 | 0.450 |" in text
    assert "| Hourly | nbeats | 96 | 1 | 20.000 | 2.000 | 1.000 |" in text
    assert "| Hourly | es_rnn (published) | | | 9.328 | 0.893 | 0.440 | |" in text
    assert "| ETTh1 | 96 | dlinear |" in text and "| M4-Hourly |" not in text, "the long-term table holds no M4 run"
    assert "| all of Weekly, Hourly | nbeats |" not in text, "Hourly has two configurations: no one average"
    report.main([str(results), "--ledger", str(ledger)])
    added = capsys.readouterr().out
    assert "4 runs added" in added  # dlinear's, the N-BEATS Hourly paper setting's two seeds and its Weekly one
    assert [r["dataset"] for r in report.load_ledger(ledger)].count("M4-Hourly") == 2, "not the shortened run"
    shutil.rmtree(results / "short")
    report.main([str(results)])
    capsys.readouterr()
    text = (results / "report.md").read_text()
    # weighted by 100 series each: sMAPE (11 + 6) / 2, MASE (0.9 + 2) / 2, OWA of those against Naive2's 20 and 2
    assert "| all of Weekly, Hourly | nbeats | | | 8.500 | 1.450 | 0.575 | weighted by series |" in text
    rows = report.load_ledger(ledger)
    page, _ = report.results_page(rows, report.load_long_term_references(report.DEFAULT_REFERENCE),
                                  report.load_settings(report.DEFAULT_SETTINGS), ledger=str(ledger),
                                  m4_reference=report.load_reference(report.DEFAULT_REFERENCE, "m4"),
                                  m4_benchmarks=report.load_m4_benchmarks(benchmarks))
    section = page[page.index("## M4 (short-term)"):]
    assert "| Hourly | nbeats (lookback 96) | ours (2 seeds) | 11.000 | 0.900 | 0.450 | — | — | — | — | — | 5 s |" \
        in section
    assert "| Hourly | theta | ours (abc1234) | 18.137 | 2.454 | 1.006 | 18.138 | 2.455 | 1.006 | — / — | — / — | — |" \
        in section
    assert "| Hourly | es_rnn | published | — | — | — | 9.328 | 0.893 | 0.440 | — | — / — | — |" in section
    assert "| Hourly | arima | published | — | — | — | — | — | — | — | 7.538 / 0.001 | — |" in section, \
        "a benchmark published with intervals only"
    assert "| Hourly | theta | published |" not in section, "a method we ran is one row, the published beside it"
