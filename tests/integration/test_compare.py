"""analysis.compare: two models' runs compared window by window, and many models ranked over many tests."""
import os

import numpy as np
import pytest

import run
from analysis import compare, report
from utils.errors import ConfigError

DIRECT = ["--nonautoregressive", "--seq_len", "48", "--output_token_len", "16"]


@pytest.fixture(scope="module")
def results(tiny_csv, tmp_path_factory):
    """DLinear with two seeds, NLinear with one, and a univariate DLinear (every channel its own window), on the
    tiny CSV: tp16 of each, trained once for the module's tests (which leave the folder as they found it)."""
    where = tmp_path_factory.mktemp("compare")
    flags = ["--data", "custom", "--root_path", str(tiny_csv.parent), "--data_path", tiny_csv.name, "--device", "cpu",
             "--results_dir", str(where / "results"), "--checkpoints", str(where / "ckpt"), *DIRECT,
             "--train_epochs", "1", "--batch_size", "16"]
    for model, extra in (("dlinear", ["--seed", "1"]), ("dlinear", ["--seed", "2"]), ("nlinear", ["--seed", "1"]),
                         ("dlinear", ["--seed", "1", "--univariate"])):
        run.main(["--model", model, *flags, *extra])
    return str(where / "results")


def _groups(results_dir):
    return report.load_runs(results_dir)[0], report.load_settings(report.DEFAULT_SETTINGS)


def test_a_pair_is_compared_on_the_seed_means_of_the_same_windows(results, capsys):
    groups, settings = _groups(results)
    dlinear = [r for r in groups.values() if r[0]["model"] == "dlinear" and r[0]["features"] == "M"][0]
    nlinear = [r for r in groups.values() if r[0]["model"] == "nlinear"][0]
    verdict, text = compare.compare_pair(groups, settings, dlinear[0]["config_id"], "nlinear", "tiny", 16)
    # the mean per-window difference is the difference of the test MSEs, the first model's averaged over its seeds
    expected = np.mean([r["mse"] for r in dlinear]) - nlinear[0]["mse"]
    mean_diff = float(text.split("seeds): ")[1].split()[0])
    assert mean_diff == pytest.approx(expected, abs=1e-5)
    assert "over 2 seeds" in text and "over 105 windows" in text and "15 lags" in text
    assert verdict in ("better", "worse", "no significant difference")
    swapped, _ = compare.compare_pair(groups, settings, "nlinear", dlinear[0]["config_id"], "tiny", 16)
    assert swapped == {"better": "worse", "worse": "better"}.get(verdict, verdict)
    compare.main([results, "nlinear", "nlinear", "--data", "tiny", "--horizon", "16"])
    out = capsys.readouterr().out
    assert "A - B per window (mean over each model's seeds): +0.00000" in out
    assert "statistic 0.000, p 1" in out and out.strip().endswith("no significant difference")


def test_runs_that_cannot_be_compared_are_refused_with_the_reason(results):
    groups, settings = _groups(results)
    with pytest.raises(compare.CompareError, match=r"dlinear has 2 configurations on tiny tp16 \(.*\): name one"):
        compare.compare_pair(groups, settings, "dlinear", "nlinear", "tiny", 16)
    univariate = [r[0]["config_id"] for r in groups.values() if r[0]["features"] == "U"][0]
    with pytest.raises(compare.CompareError, match="not scored on the same windows: features U vs M"):
        compare.compare_pair(groups, settings, univariate, "nlinear", "tiny", 16)
    with pytest.raises(compare.CompareError, match="no run of .* on tiny tp96"):
        compare.compare_pair(groups, settings, univariate, "nlinear", "tiny", 96)
    dlinear = [r[0]["config_id"] for r in groups.values() if r[0]["model"] == "dlinear" and r[0]["features"] == "M"][0]
    nlinear = [r for r in groups.values() if r[0]["model"] == "nlinear"][0][0]
    saved = os.path.join(nlinear["folder"], "window_errors.npz")
    os.rename(saved, saved + ".away")
    try:
        with pytest.raises(compare.CompareError, match="window_errors.npz is missing.*test it again"):
            compare.compare_pair(groups, settings, dlinear[:6], "nlinear", "tiny", 16)
    finally:
        os.rename(saved + ".away", saved)


def test_the_command_line_refuses_incomplete_requests(tmp_path):
    r = str(tmp_path)
    for argv, message in (([r, "a"], "needs two models"), ([r, "a", "b", "--data", "x"], "needs two models"),
                          ([r, "a", "b", "--data", "x", "--horizon", "1", "--plot", "p"], "add --ranks"),
                          ([r, "--ranks", "--metric", "nope"], "--metric nope"),
                          ([r, "--ranks", "--alpha", "1"], "--alpha"), ([r, "--ranks"], "no metrics.json of a run"),
                          ([str(tmp_path / "elsewhere"), "--ranks"], "no such folder")):
        with pytest.raises(ConfigError, match=message):
            compare.main(argv)


def test_a_probabilistic_run_is_reported_and_compared_on_its_crps(tiny_csv, tmp_path):
    """A quantile DLinear against a point NLinear: CRPS per window (a point forecast's is its absolute error) from
    window_errors.npz, the mean difference that of the two tests' crps."""
    flags = ["--data", "custom", "--root_path", str(tiny_csv.parent), "--data_path", tiny_csv.name, "--device", "cpu",
             "--results_dir", str(tmp_path / "results"), "--checkpoints", str(tmp_path / "ckpt"), *DIRECT,
             "--train_epochs", "1", "--batch_size", "16"]
    quantile = run.main(["--model", "dlinear", *flags, "--loss", "quantile"])[0]["metrics"]
    point = run.main(["--model", "nlinear", *flags])[0]["metrics"]
    assert point["crps"] == pytest.approx(point["mae"], rel=1e-12)
    groups, settings = _groups(str(tmp_path / "results"))
    assert sorted(r[0]["crps"] for r in groups.values()) == sorted([quantile["crps"], point["crps"]])
    _, text = compare.compare_pair(groups, settings, "dlinear", "nlinear", "tiny", 16, metric="crps")
    assert "tiny, test tp16: crps over 105 windows" in text
    mean_diff = float(text.split("seeds): ")[1].split()[0])
    assert mean_diff == pytest.approx(quantile["crps"] - point["crps"], abs=1e-5)
