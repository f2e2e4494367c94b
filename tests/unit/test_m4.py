"""The M4 competition's files, measures and simplest benchmarks (data_provider/m4.py, utils/m4.py) on generated
series whose answers are known; scripts/reproduce/m4_benchmarks.py scores them as the competition did."""
import csv
import os
import subprocess

import numpy as np
import pytest

from data_provider import m4 as m4_data
from scripts.reproduce import m4_benchmarks
from tests.conftest import REPO, m4_files, m4_like, write_m4
from utils import m4
from utils.errors import ConfigError


def test_the_reader_keeps_each_series_to_its_last_value_and_pairs_train_with_test(tmp_path):
    """A Monthly-shaped file (horizon 18): the other subsets read as the shipped Hourly and Weekly ones."""
    train = [np.arange(1, 31, dtype=float), np.arange(5, 60, dtype=float)]
    test = [np.full(18, 7.0), np.full(18, 8.5)]
    m4_files(tmp_path, "Monthly", train, test)
    series, values = m4_data.load(str(tmp_path), "Monthly")
    assert [len(x) for x in series] == [30, 55] and np.array_equal(series[1], train[1])
    assert values.shape == (2, 18) and values[1, 0] == 8.5
    write_m4(tmp_path / "Monthly-test.csv", [("M1", test[0]), ("M2", np.full(17, 1.0))])
    with pytest.raises(ConfigError, match="18 values each"):
        m4_data.load(str(tmp_path), "Monthly")
    with pytest.raises(ConfigError, match="Hourly-train.csv: no such file"):
        m4_data.load(str(tmp_path), "Hourly")


def test_smape_mase_and_owa_are_the_competitions_formulas():
    insample, y, f = np.array([1.0, 3.0, 2.0, 6.0, 4.0]), np.array([5.0, 5.0]), np.array([4.0, 6.0])
    assert m4.smape(y, f) == pytest.approx([200 / 9, 200 / 11])
    assert m4.mase_scale(insample, 1) == pytest.approx((2 + 1 + 4 + 2) / 4)
    assert m4.mase_scale(insample, 2) == pytest.approx((1 + 3 + 2) / 3)
    assert m4.mase(insample, y, f, 2) == pytest.approx([0.5, 0.5])
    assert m4.owa(10.0, 2.0, 20.0, 1.0) == pytest.approx(1.25) and m4.owa(3.0, 4.0, 3.0, 4.0) == 1


def test_the_average_over_subsets_is_the_competitions_total():
    """M4-methods' "Evaluation and Ranks.xlsx", sheet Point Forecasts-Frequency (6c1067e): Naive2's and Theta's
    sMAPE and MASE per subset (Yearly .. Hourly: 23000, 24000, 48000, 359, 4227, 414 series) give its Total column,
    up to the per-subset values' rounding to 3 decimals (the sheet's Total is of the unrounded ones)."""
    series = (23000, 24000, 48000, 359, 4227, 414)
    naive2 = ((16.342, 11.012, 14.427, 9.161, 3.045, 18.383), (3.974, 1.371, 1.063, 2.777, 3.278, 2.395))
    theta = ((14.593, 10.311, 13.002, 9.093, 3.053, 18.138), (3.382, 1.232, 0.970, 2.637, 3.262, 2.455))
    totals = m4.weighted_average(list(zip(series, *theta, *naive2)))
    assert totals[:2] == pytest.approx((12.30897, 1.696496), abs=5e-4)
    assert totals[2] == pytest.approx(m4.owa(12.30897, 1.696496, 13.56407, 1.912112), abs=5e-4)  # the sheet's 0.897
    assert m4.weighted_average(list(zip(series, *naive2, *naive2))) == pytest.approx((13.56407, 1.912112, 1.0),
                                                                                      abs=5e-4)


def test_naive2_continues_a_multiplicative_season_exactly_and_treats_noise_as_naive1():
    m, profile = 4, np.array([0.5, 1.5, 0.8, 1.2])
    level = 10.0
    x = level * np.resize(profile, 40)
    assert m4.is_seasonal(x, m)
    assert m4.seasonal_indices(x, m) == pytest.approx(np.resize(profile, 40))
    assert m4.naive2(x, 6, m) == pytest.approx(level * np.resize(profile, 46)[40:])
    assert m4.seasonal_naive(x, 6, m) == pytest.approx(x[[36, 37, 38, 39, 36, 37]])
    noise = np.random.default_rng(0).normal(10, 1, 60)
    assert not m4.is_seasonal(noise, m) and np.all(m4.naive2(noise, 5, m) == noise[-1])
    assert not m4.is_seasonal(x[:11], m), "shorter than three cycles: never seasonal"
    assert not m4.is_seasonal(x, 1) and not m4.is_seasonal(np.full(40, 3.0), m)
    odd = 3 + np.resize([0.5, 2.0, 1.0], 30)  # an odd cycle: a centred 3-point moving average
    assert m4.seasonal_indices(odd, 3).mean() == pytest.approx(1) and m4.naive2(odd, 3, 3) == pytest.approx(odd[:3])


def test_the_fitted_benchmarks_forecast_what_their_models_say():
    """statsmodels' fits, seasonally adjusted as Naive2 is: a constant series stays constant; a line is continued by
    Holt and, below the line's slope (its drift is half of it, SES's level lags), by Theta; Comb is the mean of
    SES, Holt and Damped."""
    flat, line = np.full(30, 4.0), 2.0 + 0.5 * np.arange(30)
    for name in ("SES", "Holt", "Damped", "Theta", "Comb"):
        assert m4.BENCHMARKS[name](flat, 5, 1) == pytest.approx(np.full(5, 4.0), rel=1e-6), name
    assert m4.BENCHMARKS["Holt"](line, 3, 1) == pytest.approx(2.0 + 0.5 * np.arange(30, 33), rel=1e-4)
    theta = m4.BENCHMARKS["Theta"](line, 3, 1)
    assert np.all(np.diff(theta) > 0) and theta[0] < 2.0 + 0.5 * 30
    parts = [m4.BENCHMARKS[name](line, 3, 1) for name in ("SES", "Holt", "Damped")]
    assert m4.BENCHMARKS["Comb"](line, 3, 1) == pytest.approx(np.mean(parts, axis=0))


def test_the_benchmarks_script_scores_the_files_naive2_is_its_own_reference(tmp_path):
    rng = np.random.default_rng(1)
    series = [50 + 10 * np.resize(np.sin(np.arange(24) / 24 * 2 * np.pi), n) + rng.normal(0, 1, n)
              for n in (100, 130, 170)]
    m4_dir = tmp_path / "m4"
    m4_dir.mkdir()
    m4_files(m4_dir, "Hourly", [x[:-48] for x in series], [x[-48:] for x in series])
    text = m4_benchmarks.main(["--data_root", str(tmp_path), "--subsets", "Hourly"])
    assert "| Hourly | Naive2 |" in text and "| 1.000 | — | — | 18.383 / 2.395 / 1.000 | — / — |" in text
    scored, _ = m4_benchmarks.scores([x[:-48] for x in series], np.stack([x[-48:] for x in series]), 24)
    assert scored["sNaive"][2] < 1 < scored["Naive1"][2], "a seasonal series: sNaive beats Naive2 beats Naive1"
    assert set(scored) == {"Naive1", "sNaive", "Naive2", "SES", "Holt", "Damped", "Theta", "Comb"}
    with pytest.raises(ConfigError, match="Weekly-train.csv: no such file"):
        m4_benchmarks.main(["--data_root", str(tmp_path), "--subsets", "Weekly"])
    record = tmp_path / "record.csv"
    record.write_text("subset,benchmark,horizon,smape,mase,owa,commit,machine\nWeekly,theta,13,9,2,1,abc,cpu\n"
                      "Hourly,theta,48,1,1,1,old,cpu\n")
    m4_benchmarks.main(["--data_root", str(tmp_path), "--subsets", "Hourly", "--record", str(record)])
    rows = list(csv.DictReader(open(record)))
    assert [(r["subset"], r["benchmark"]) for r in rows][:2] == [("Weekly", "theta"), ("Hourly", "naive1")], \
        "another subset's rows are kept, this one's replaced"
    naive2 = next(r for r in rows if (r["subset"], r["benchmark"]) == ("Hourly", "naive2"))
    assert float(naive2["owa"]) == 1 and float(naive2["smape"]) == pytest.approx(scored["Naive2"][0], rel=1e-5)


def test_msis_acd_and_naive1s_interval_are_the_competitions():
    """MSIS: width plus 40 x the miss (alpha 0.05) over MASE's scale; ACD: |coverage - 0.95|; R's naive()
    interval widens with the square root of the step around the last value."""
    x = np.array([1.0, 3.0, 2.0, 4.0])  # one-step changes 2, -1, 2: sigma^2 = 3, MASE's scale (m 1) 5/3
    lo, hi = m4.naive1_interval(x, 2)
    half = 1.959963984540054 * np.sqrt([3.0, 6.0])
    assert np.allclose(lo, 4 - half) and np.allclose(hi, 4 + half)
    y, lo, hi = np.array([5.0, 0.0, 9.0]), np.array([4.0, 1.0, 2.0]), np.array([6.0, 3.0, 8.0])
    assert np.allclose(m4.msis(x, y, lo, hi, 1), np.array([2, 2 + 40 * 1, 6 + 40 * 1]) / (5 / 3))
    assert m4.acd(y, lo, hi) == pytest.approx(abs(1 / 3 - 0.95))


def _m4_environment() -> str:
    """The python of .venv-m4 (requirements-m4-statistical.txt), which CI makes; the test skips without it."""
    python = os.path.join(REPO, ".venv-m4", "bin", "python")
    if not os.path.isfile(python) or subprocess.run([python, "-c", "import statsforecast"]).returncode:
        pytest.skip("no .venv-m4 with statsforecast (python3 -m venv .venv-m4 && .venv-m4/bin/pip install -r "
                    "requirements-m4-statistical.txt)")
    return python


@pytest.mark.slow  # subprocesses of the statsforecast environment
def test_ets_and_arima_come_from_their_own_environment_cached_under_the_files_fingerprint(tmp_path):
    """--stats_python: statsforecast's ETS and ARIMA in the environment requirements-m4-statistical.txt makes (CI
    makes it as .venv-m4; without it only the refusal is checked), scored beside the others with MSIS and ACD; run
    again, the forecasts are read back; a changed file is forecast anew."""
    with pytest.raises(ConfigError, match="cannot import statsforecast there; make that environment with: python3"):
        m4_benchmarks.main(["--data_root", str(tmp_path), "--stats_python", str(tmp_path / "nope")])
    python = _m4_environment()
    train, test = m4_like(4, 13, 1, (60, 90))
    (tmp_path / "m4").mkdir()
    m4_files(tmp_path / "m4", "Weekly", train, test)
    cache = tmp_path / "cache"
    flags = ["--data_root", str(tmp_path), "--subsets", "Weekly", "--stats_python", python, "--stats_cache",
             str(cache), "--processes", "1"]
    text = m4_benchmarks.main(flags)
    for name in ("ETS", "ARIMA", "Naive1"):
        row = next(line for line in text.splitlines() if line.startswith(f"| Weekly | {name} |")).split(" | ")
        assert all(np.isfinite(float(v)) for v in row[2:7]), row
    assert "| Weekly | SES |" in text and "| — | — | 9.012 / 2.685 / 0.975 | — / — |" in text
    forecasts = sorted(p.name for p in cache.iterdir())
    assert len(forecasts) == 3 and all(p.startswith("Weekly-") for p in forecasts)
    stamps = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    assert m4_benchmarks.main(flags) == text
    assert {p.name: p.stat().st_mtime_ns for p in cache.iterdir()} == stamps, "read back, not forecast again"
    m4_files(tmp_path / "m4", "Weekly", train, [y + 1 for y in test])
    m4_benchmarks.main(flags)
    assert len(list(cache.iterdir())) == 6, "another fingerprint: forecast anew, the old ones kept apart"


@pytest.mark.slow  # fits and simulates in the statsforecast environment
def test_ets_intervals_where_statsforecast_differs_from_the_book_agree_with_simulated_paths():
    """m4_statistical.py computes the variance of multiplicative-season ETS models itself (statsforecast 2.1.1's
    recursion never moves its state on): on MNM and MAM fits of a generated hourly series, the 95% interval agrees
    with the quantiles of 4000 paths simulated from the fit (on average to 2% of its width, at every step to 10%: the
normal interval against the paths' skewed quantiles, and their sampling error); statsforecast's own is not (each
step's variance taken at the last season's index: too wide at some hours, too narrow at others)."""
    python = _m4_environment()
    check = """
import sys, numpy as np
sys.path.insert(0, "scripts/reproduce")
import m4_statistical as w
from statsforecast.ets import simulate_ets
from statsforecast.models import AutoETS
t = np.arange(24 * 30)
rng = np.random.default_rng(0)
level = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, len(t))))
x = level * (1 + 0.5 * np.sin(2 * np.pi * t / 24)) * rng.lognormal(0, 0.05, len(t))
for form in ("MNM", "MAM"):
    fit = AutoETS(season_length=24, model=form, damped=False).fit(x)
    out = fit.predict(h=48, level=[95])
    variance = w.corrected_variance(fit.model_, out["mean"])
    lo, hi = np.quantile(simulate_ets(fit.model_, 48, 4000, seed=1), [0.025, 0.975], axis=0)
    ours, simulated, theirs = 2 * w.Z * np.sqrt(variance), hi - lo, out["hi-95"] - out["lo-95"]
    ratio = ours / simulated
    assert abs(ratio.mean() - 1) < 0.02 and np.abs(ratio - 1).max() < 0.1, (form, ratio)
    assert np.abs(theirs / simulated - 1).mean() > 0.1, (form, theirs / simulated)
"""
    done = subprocess.run([python, "-c", check], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
