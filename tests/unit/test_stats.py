"""Pure statistics: Diebold-Mariano with overlapping windows, block bootstrap, verdict, Friedman/Nemenyi, CD
diagram."""
import numpy as np
import pytest
from matplotlib.image import imread
from scipy import stats as sps

from analysis.stats import (DMResult, average_ranks, block_bootstrap_ci, cd_diagram, cliques, diebold_mariano,
                             friedman, nemenyi_cd, verdict)


def _losses(n, seed=0):
    """Per-window losses of a model: positive and skewed, like window MSEs."""
    return np.random.default_rng(seed).gamma(2.0, 0.5, size=n)


def _moving_sum_noise(n, horizon, rng):
    """An MA(horizon-1) series of mean 0: what the loss difference of stride-1 windows of that horizon looks
    like, each error step entering `horizon` consecutive windows."""
    return np.convolve(rng.standard_normal(n + horizon - 1), np.ones(horizon), mode="valid")


# ---- two models on one split ----------------------------------------------------------------
def test_identical_forecasts_show_no_difference():
    loss = _losses(200)
    dm = diebold_mariano(loss, loss.copy(), horizon=24)
    ci = block_bootstrap_ci(loss, loss.copy(), block=24)
    assert (dm.statistic, dm.p_value, dm.mean_diff, dm.n, dm.lags) == (0.0, 1.0, 0.0, 200, 23)
    assert ci[0] <= 0 <= ci[1]
    assert verdict(dm, ci, alpha=0.05) == "no significant difference"


def test_a_clearly_better_forecast_is_better_and_the_swap_is_worse():
    rng = np.random.default_rng(1)
    loss_a = _losses(300)
    loss_b = loss_a + 0.5 + 0.05 * _moving_sum_noise(300, 12, rng)
    dm, ci = diebold_mariano(loss_a, loss_b, horizon=12), block_bootstrap_ci(loss_a, loss_b, block=12)
    assert dm.mean_diff < 0 and dm.p_value < 0.01 and ci[1] < 0
    assert verdict(dm, ci, alpha=0.05) == "better"
    swapped = diebold_mariano(loss_b, loss_a, horizon=12), block_bootstrap_ci(loss_b, loss_a, block=12)
    assert verdict(*swapped, alpha=0.05) == "worse"


def test_verdict_needs_the_test_and_the_interval_to_agree():
    rejects = DMResult(statistic=-3.0, p_value=0.001, mean_diff=-0.2, n=100, lags=0)
    assert verdict(rejects, (-0.3, 0.01), alpha=0.05) == "no significant difference"
    accepts = DMResult(statistic=-1.0, p_value=0.3, mean_diff=-0.2, n=100, lags=0)
    assert verdict(accepts, (-0.3, -0.1), alpha=0.05) == "no significant difference"
    assert verdict(rejects, (-0.3, -0.1), alpha=0.05) == "better"


@pytest.mark.parametrize("seed", range(4))
def test_horizon_one_is_the_paired_t_test(seed):
    loss_a = _losses(150, seed)
    loss_b = loss_a + 0.1 * np.random.default_rng(seed + 10).standard_normal(150) + 0.01
    dm, paired = diebold_mariano(loss_a, loss_b, horizon=1), sps.ttest_rel(loss_a, loss_b)
    assert dm.statistic == pytest.approx(paired.statistic, rel=1e-12, abs=1e-12)
    assert dm.p_value == pytest.approx(paired.pvalue, rel=1e-12, abs=1e-12)


def test_overlapping_windows_keep_the_test_at_its_level_where_the_iid_test_over_rejects():
    """Under equal accuracy, a differential autocorrelated up to lag H-1: the lag-aware test rejects about 5%
    of the time, the iid (horizon 1) one far more often."""
    horizon, n, reps = 8, 400, 200
    rng = np.random.default_rng(7)
    rejected_lagged = rejected_iid = 0
    for _ in range(reps):
        loss_a = _losses(n, int(rng.integers(1 << 30)))
        loss_b = loss_a - _moving_sum_noise(n, horizon, rng)
        rejected_lagged += diebold_mariano(loss_a, loss_b, horizon=horizon).p_value < 0.05
        rejected_iid += diebold_mariano(loss_a, loss_b, horizon=1).p_value < 0.05
    assert 0.01 <= rejected_lagged / reps <= 0.12
    assert rejected_iid / reps > 0.3


def test_a_negative_rectangular_variance_falls_back_to_bartlett():
    """An alternating differential makes the lag-1 autocovariance about -gamma_0, so gamma_0 + 2 gamma_1 < 0."""
    d = np.tile([1.0, -1.0], 50) + 0.05
    dm = diebold_mariano(d, np.zeros_like(d), horizon=2)
    centred = d - d.mean()
    gamma0, gamma1 = centred @ centred / d.size, centred[1:] @ centred[:-1] / d.size
    assert gamma0 + 2 * gamma1 < 0
    n, h = d.size, 2
    expected = np.sqrt((n + 1 - 2 * h + h * (h - 1) / n) / n) * d.mean() / np.sqrt((gamma0 + gamma1) / n)
    assert dm.statistic == pytest.approx(expected, rel=1e-12)
    assert 0 <= dm.p_value <= 1 and dm.kernel == "bartlett"
    assert diebold_mariano(d[::-1] + np.arange(100) % 7, np.zeros_like(d), horizon=2).kernel == "rectangular"


def test_bootstrap_is_reproducible_per_seed():
    loss_a, loss_b = _losses(120, 1), _losses(120, 2)
    assert block_bootstrap_ci(loss_a, loss_b, block=6, seed=3) == block_bootstrap_ci(loss_a, loss_b, block=6, seed=3)
    assert block_bootstrap_ci(loss_a, loss_b, block=6, seed=3) != block_bootstrap_ci(loss_a, loss_b, block=6, seed=4)


def test_paired_bootstrap_of_iid_data_is_close_to_the_t_interval():
    loss_a, loss_b = _losses(500, 1), _losses(500, 2)
    d = loss_a - loss_b
    half = sps.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    low, high = block_bootstrap_ci(loss_a, loss_b, block=1, n_boot=4000)
    assert low == pytest.approx(d.mean() - half, abs=0.1 * half)
    assert high == pytest.approx(d.mean() + half, abs=0.1 * half)


def test_blocks_widen_the_interval_of_an_autocorrelated_differential():
    """A paired bootstrap of an MA(11) differential is about sqrt(12) times too narrow; blocks of 4 horizons
    recover the width of the long-run standard error."""
    horizon, n = 12, 2000
    d = _moving_sum_noise(n, horizon, np.random.default_rng(5))
    width = {block: np.diff(block_bootstrap_ci(d, np.zeros(n), block=block))[0] for block in (1, 48)}
    long_run_se = horizon * 1.0 / np.sqrt(n)  # sum of the MA weights x noise sd
    assert width[1] < 0.5 * width[48]
    assert width[48] == pytest.approx(2 * 1.96 * long_run_se, rel=0.25)


def test_bootstrap_covers_the_whole_series_with_a_block_that_does_not_divide_it():
    d = np.arange(10.0)
    low, high = block_bootstrap_ci(d, np.zeros(10), block=10, n_boot=500)
    assert low == pytest.approx(d.mean()) and high == pytest.approx(d.mean())  # any wrapped block is a rotation
    low, high = block_bootstrap_ci(d, np.zeros(10), block=3, n_boot=500)
    assert d.min() < low < d.mean() < high < d.max()


@pytest.mark.parametrize("call", [
    lambda: diebold_mariano(np.ones(5), np.ones(4)),
    lambda: diebold_mariano(np.ones(1), np.ones(1)),
    lambda: diebold_mariano(np.array([1.0, np.nan, 2.0]), np.ones(3)),
    lambda: diebold_mariano(np.ones(5), np.ones(5), horizon=5),
    lambda: diebold_mariano(np.ones(5), np.ones(5), horizon=0),
    lambda: block_bootstrap_ci(np.ones(5), np.ones(6), block=2),
    lambda: block_bootstrap_ci(np.ones(1), np.ones(1), block=1),
    lambda: block_bootstrap_ci(np.ones(3), np.array([0.0, np.nan, 1.0]), block=1),
    lambda: block_bootstrap_ci(np.ones(5), np.ones(5), block=6),
    lambda: nemenyi_cd(1, 10),
    lambda: nemenyi_cd(4, 0),
    lambda: average_ranks(np.array([[1.0, np.nan]])),
    lambda: cliques(["a", "b"], [1.0, 2.0, 3.0], 1.0),
])
def test_input_no_test_can_be_honest_about_is_refused(call):
    with pytest.raises(ValueError):
        call()


# ---- several methods over several problems ---------------------------------------------------
def test_average_ranks_give_ties_their_mean_rank():
    scores = np.array([[0.1, 0.2, 0.2], [0.3, 0.1, 0.2]])
    np.testing.assert_allclose(average_ranks(scores), [(1 + 3) / 2, (2.5 + 1) / 2, (2.5 + 2) / 2])


@pytest.mark.parametrize("with_ties", [False, True])
def test_friedman_matches_scipy(with_ties):
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 4, size=(12, 5)).astype(float) if with_ties else rng.random((12, 5))
    scores[:, 0] -= 0.5  # one method better on most problems
    result, reference = friedman(scores), sps.friedmanchisquare(*scores.T)
    assert result.chi2 == pytest.approx(reference.statistic, rel=1e-12)
    assert result.p_value == pytest.approx(reference.pvalue, rel=1e-12)
    n, k = scores.shape
    f_stat = (n - 1) * result.chi2 / (n * (k - 1) - result.chi2)
    assert result.iman_davenport == pytest.approx(f_stat, rel=1e-12)
    assert result.iman_davenport_p == pytest.approx(sps.f.sf(f_stat, k - 1, (k - 1) * (n - 1)), rel=1e-12)
    assert (result.n, result.k) == (12, 5)


def test_friedman_of_a_unanimous_ranking_is_infinitely_significant_by_f():
    result = friedman(np.tile([0.1, 0.2, 0.3, 0.4], (6, 1)))
    assert result.chi2 == pytest.approx(6 * 3) and result.iman_davenport == np.inf and result.iman_davenport_p == 0


def test_nemenyi_q_matches_demsar_table():
    table = [1.960, 2.343, 2.569, 2.728, 2.850, 2.949, 3.031, 3.102, 3.164]
    for k, q in zip(range(2, 11), table):
        q_alpha = nemenyi_cd(k, 1) / np.sqrt(k * (k + 1) / 6)
        assert q_alpha == pytest.approx(q, abs=1e-3)  # the table's last digit is off by up to 7e-4 (k=3, 7)
    assert nemenyi_cd(4, 14) == pytest.approx(2.569 * np.sqrt(4 * 5 / (6 * 14)), abs=1e-3)  # Demsar's example: 1.25


def test_cliques_are_maximal_runs_within_the_critical_difference():
    names = ["e", "b", "a", "d", "c"]
    ranks = [4.0, 1.5, 1.0, 3.5, 2.2]
    assert cliques(names, ranks, cd=1.0) == [("a", "b"), ("b", "c"), ("d", "e")]
    assert cliques(names, ranks, cd=0.5) == []  # a difference of exactly cd is significant
    assert cliques(names, ranks, cd=10.0) == [("a", "b", "c", "d", "e")]


def test_cd_diagram_writes_a_png(tmp_path):
    names = ["PatchTST", "DLinear", "iTransformer", "TimesNet", "Autoformer", "Informer"]
    ranks = average_ranks(np.random.default_rng(0).random((14, 6)) + np.linspace(0, 0.6, 6))
    path = tmp_path / "cd.png"
    cd_diagram(names, ranks, nemenyi_cd(6, 14), path, title="MSE, 14 problems")
    assert path.stat().st_size > 1000
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 300
