"""--protocol through run.py: TFB's split of the whole file, every test window scored, its own identity, and the
report comparing each run with the numbers of its own protocol."""
import json

import numpy as np
import pytest

import run
from analysis import report
from exp.config import parse_args, resolve
from utils.errors import ConfigError


def test_a_run_under_tfb_is_split_at_its_ratios_scores_every_window_and_is_another_run(tiny_args, tmp_path):
    args = tiny_args + ["--model", "dlinear", "--nonautoregressive", "--train_epochs", "1"]
    tslib = run.main(args)[0]["metrics"]
    tfb = run.main(args + ["--protocol", "tfb"])[0]["metrics"]
    # 602 rows. TSLib's custom split tests the last int(0.2 x 602) = 120 rows: 120 - 16 + 1 = 105 windows.
    # TFB's: int(0.8 x 602) = 481 rows train and validate, the other 121 test: 106 windows, none dropped.
    assert (tslib["n_test_windows"], tfb["n_test_windows"]) == (105, 106)
    assert tfb["config"]["task"]["protocol"] == "tfb" and "protocol" not in tslib["config"]["task"]
    assert tfb["config_id"] != tslib["config_id"] and tfb["mse"] != tslib["mse"]
    # TFB averages each window's own MSE and MAE (its test batch of one): the same numbers, every window being
    # horizon x channels points
    windows = np.load(tmp_path / "results" / tfb["setting"] / "tp16" / "window_errors.npz")
    assert len(windows["mse"]) == 106
    assert windows["mse"].mean() == pytest.approx(tfb["mse"], rel=1e-6)  # saved as float32
    assert windows["mae"].mean() == pytest.approx(tfb["mae"], rel=1e-6)  # saved as float32


def test_the_protocol_is_refused_where_it_splits_nothing(tmp_path):
    m4 = ["--task", "short_term", "--data", "m4", "--seasonal_patterns", "Hourly", "--model", "dlinear"]
    with pytest.raises(ConfigError, match="--protocol tfb splits one table's rows .*M4 has its own protocol"):
        resolve(parse_args(m4 + ["--protocol", "tfb"]))
    with pytest.raises(ConfigError, match="--data corpus splits each series of its files"):
        resolve(parse_args(["--data", "corpus", "--root_path", str(tmp_path), "--model", "dlinear",
                            "--nonautoregressive", "--protocol", "tfb"]))


def test_the_report_compares_a_tfb_run_with_tfbs_published_row_and_names_its_protocol(tiny_args, tmp_path,
                                                                                     monkeypatch):
    args = tiny_args + ["--model", "dlinear", "--nonautoregressive", "--train_epochs", "1"]
    tslib = run.main(args)[0]["metrics"]
    tfb = run.main(args + ["--protocol", "tfb"])[0]["metrics"]
    reference = tmp_path / "published.csv"  # one invented number per protocol, to see which one each run meets
    reference.write_text("paper,table,model,dataset,seq_len,horizon,mse,mae,source,protocol\n"
                         "P,T,dlinear,tiny,48,16,1.0,1.0,x,tslib\nP,T,dlinear,tiny,48,16,2.0,2.0,x,tfb\n")
    groups, _ = report.load_runs(str(tmp_path / "results"))
    settings = {("dlinear", "tiny", 16, protocol): m["config"] for protocol, m in (("tslib", tslib), ("tfb", tfb))}
    table, compared, *_ = report.build_table(groups, report.load_long_term_references(str(reference)), settings)
    assert compared == 2
    rows = {line.split("|")[1].strip(): line for line in table.splitlines()[2:]}
    assert set(rows) == {"tiny", "tiny (tfb)"}
    assert f"| {tslib['mse']:.3f} | 1.000 |" in rows["tiny"] and f"| {tfb['mse']:.3f} | 2.000 |" in rows["tiny (tfb)"]
    assert json.loads((tmp_path / "results" / tfb["setting"] / "tp16" / "metrics.json").read_text())["config"]["task"][
        "protocol"] == "tfb"
    rows = report.paper_rows(groups, settings)  # the ledger's rows: each with its protocol, a page section of its own
    assert sorted(r["protocol"] for r in rows) == ["tfb", "tslib"]
    monkeypatch.setitem(report.PAGE_HORIZONS, "tiny", [16])
    page, stale = report.results_page(rows, report.load_long_term_references(str(reference)), settings)
    assert not stale and "## tiny\n" in page and "## tiny (tfb)\n" in page
    tfb_section = page[page.index("## tiny (tfb)"):]
    assert "| | | paper | 2.000 | 2.000 | 2.000 | 2.000 | |" in tfb_section and "1.000" not in tfb_section


def test_the_report_keeps_the_lookback_with_the_lowest_validation_loss_under_tfb(tiny_args, tmp_path):
    args = tiny_args + ["--model", "dlinear", "--nonautoregressive", "--train_epochs", "1", "--protocol", "tfb"]
    runs = {seq_len: run.main(args[:args.index("--seq_len")] + args[args.index("--seq_len") + 2:]
                              + ["--seq_len", str(seq_len)])[0]["metrics"] for seq_len in (32, 48)}
    run.main(tiny_args + ["--model", "dlinear", "--nonautoregressive", "--train_epochs", "1", "--seq_len", "32"])
    groups, _ = report.load_runs(str(tmp_path / "results"))
    vali = {seq_len: report._best_vali_loss(m | {"folder": str(tmp_path / "results" / m["setting"] / m["test"])})
            for seq_len, m in runs.items()}
    chosen = min(vali, key=vali.get)
    (row,) = report.lookback_choice_table(groups).splitlines()[2:]  # the TSLib run is no candidate
    assert row == (f"| tiny (tfb) | 16 | dlinear | 32: {vali[32]:.4f}, 48: {vali[48]:.4f} | {chosen} | "
                   f"{runs[chosen]['mse']:.3f} | {runs[chosen]['mae']:.3f} |")
