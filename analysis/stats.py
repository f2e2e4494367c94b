"""Statistics that tell a real difference between forecasting models from noise.

Two models on one test split: per-window losses, compared by the Diebold-Mariano test and a block bootstrap
interval. Test windows start at consecutive time steps, so windows of horizon H share H-1 target steps and
their losses (and the loss differences between two models) are autocorrelated up to lag H-1: an iid test
would see far more evidence than there is. Several models on several problems (datasets x horizons): the
Friedman test on their ranks, the Nemenyi critical difference and its diagram.

References:
- F. X. Diebold, R. S. Mariano (1995), Comparing predictive accuracy, J. Business & Economic Statistics 13(3).
- D. Harvey, S. Leybourne, P. Newbold (1997), Testing the equality of prediction mean squared errors,
  International Journal of Forecasting 13(2): the small-sample correction and Student t reference.
- H. R. Kunsch (1989), The jackknife and the bootstrap for general stationary observations, Annals of
  Statistics 17(3): the moving-block bootstrap; D. N. Politis, J. P. Romano (1994), The stationary
  bootstrap, JASA 89(428), and (1992) their circular variant that wraps blocks around the series' end.
- J. Demsar (2006), Statistical comparisons of classifiers over multiple data sets, JMLR 7: Friedman with
  the Iman-Davenport F, the Nemenyi critical difference and the CD diagram.
"""
from dataclasses import dataclass
from functools import lru_cache
from os import PathLike
from typing import Sequence

import numpy as np
from scipy import stats as sps

from utils.files import write_atomic

# Block starts drawn at once: bounds the bootstrap's memory (tens of MiB) whatever resamples x windows is.
_DRAWS_PER_CHUNK = 1 << 20


@dataclass(frozen=True)
class DMResult:
    """Diebold-Mariano test of loss_a against loss_b; mean_diff < 0 means A has the lower loss."""
    statistic: float
    p_value: float
    mean_diff: float
    n: int
    lags: int
    kernel: str = "rectangular"  # "bartlett" where the rectangular long-run variance was not positive


@dataclass(frozen=True)
class FriedmanResult:
    """Friedman test that k methods rank alike over n problems, with the Iman-Davenport F that Demsar
    recommends (the chi-square is conservative)."""
    chi2: float
    p_value: float
    iman_davenport: float
    iman_davenport_p: float
    n: int
    k: int


def _loss_differential(loss_a, loss_b) -> np.ndarray:
    """loss_a - loss_b per window, after refusing input no test can be honest about."""
    a, b = np.asarray(loss_a, dtype=np.float64), np.asarray(loss_b, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"losses must be 1-D (one loss per window), got shapes {a.shape} and {b.shape}")
    if a.shape != b.shape:
        raise ValueError(f"loss_a and loss_b differ in length: {a.size} vs {b.size} windows")
    if a.size < 2:
        raise ValueError(f"at least 2 windows are needed, got {a.size}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("losses contain NaN or inf")
    return a - b


def diebold_mariano(loss_a, loss_b, horizon: int = 1) -> DMResult:
    """Two-sided Diebold-Mariano test of equal expected loss, with the Harvey-Leybourne-Newbold correction.

    d_t = loss_a - loss_b. The variance of mean(d) is the long-run variance: the autocovariances of d up to
    lag horizon-1 (the overlap of stride-1 windows of that horizon) with equal weights, DM's original
    rectangular kernel. That sum is not guaranteed positive (it can turn negative with many lags); then the
    Bartlett (Newey-West) kernel over the same lags, positive by construction, takes its place. The statistic
    is scaled by sqrt((n + 1 - 2h + h(h-1)/n) / n) and referred to Student t with n-1 df (HLN 1997); with
    horizon 1 this is exactly the paired t-test. Identical losses give statistic 0 and p 1.
    """
    d = _loss_differential(loss_a, loss_b)
    n = d.size
    if not isinstance(horizon, (int, np.integer)) or horizon < 1:
        raise ValueError(f"horizon must be a positive integer, got {horizon!r}")
    if horizon >= n:
        raise ValueError(f"horizon {horizon} needs more than {horizon} windows, got {n}")
    mean_diff, lags = float(d.mean()), int(horizon) - 1
    if not d.any():
        return DMResult(0.0, 1.0, 0.0, n, lags)
    centred = d - mean_diff
    autocov = np.array([centred[k:] @ centred[:n - k] for k in range(lags + 1)]) / n
    long_run, kernel = autocov[0] + 2 * autocov[1:].sum(), "rectangular"
    if long_run <= 0:
        kernel = "bartlett"
        bartlett = 1 - np.arange(1, lags + 1) / (lags + 1)
        long_run = max(autocov[0] + 2 * (bartlett * autocov[1:]).sum(), 0.0)  # >= 0 but for rounding
    h = lags + 1
    correction = np.sqrt((n + 1 - 2 * h + h * (h - 1) / n) / n)
    with np.errstate(divide="ignore"):  # a constant non-zero difference: infinite evidence, as in ttest_rel
        statistic = float(correction * mean_diff / np.sqrt(long_run / n))
    p_value = float(2 * sps.t.sf(abs(statistic), df=n - 1))
    return DMResult(statistic, p_value, mean_diff, n, lags, kernel)


def block_bootstrap_ci(loss_a, loss_b, block: int, n_boot: int = 2000, level: float = 0.95,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile interval of mean(loss_a - loss_b) under a circular moving-block bootstrap.

    Each resample joins blocks of `block` consecutive windows drawn at uniform starts, wrapping around the
    end so every window is equally likely, cut to the original length. The resampled mean's variance weighs
    the lag-k autocovariance by (1 - k/block), so for stride-1 windows of horizon H a block of several H
    (say 4H) comes close to the long-run variance, block=H still falls short, and block=1 (the ordinary paired
    bootstrap) ignores the overlap and is far too narrow. Block sums come from prefix sums, so
    memory grows with the number of blocks drawn rather than with resamples x windows. Seeded: the same
    inputs and seed give the same interval.
    """
    d = _loss_differential(loss_a, loss_b)
    n = d.size
    if not isinstance(block, (int, np.integer)) or not 1 <= block <= n:
        raise ValueError(f"block must be an integer in [1, {n}], got {block!r}")
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    mean_diff = d.mean()
    # centred prefix sums over the series extended by one block, so a wrapped block is one subtraction
    prefix = np.concatenate(([0.0], np.cumsum(np.concatenate((d, d[:block])) - mean_diff)))
    n_blocks = -(-n // block)
    last_len = n - (n_blocks - 1) * block  # the final block is cut to fill exactly n windows
    rng = np.random.default_rng(seed)
    per_chunk = max(1, _DRAWS_PER_CHUNK // n_blocks)
    means = []
    for done in range(0, n_boot, per_chunk):
        starts = rng.integers(0, n, size=(min(per_chunk, n_boot - done), n_blocks))
        whole = (prefix[starts[:, :-1] + block] - prefix[starts[:, :-1]]).sum(axis=1)
        cut = prefix[starts[:, -1] + last_len] - prefix[starts[:, -1]]
        means.append(mean_diff + (whole + cut) / n)
    low, high = np.quantile(np.concatenate(means), [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


def verdict(dm: DMResult, ci: tuple, alpha: float) -> str:
    """"better" / "worse" / "no significant difference" for model A against model B.

    Significant only when the DM test rejects at alpha and the bootstrap interval excludes 0 on the same side.
    The two lean on different assumptions: DM on a normal limit and a variance from a handful of estimated
    autocovariances (shaky with heavy-tailed losses or a kernel fallback), the bootstrap on its block length
    capturing the dependence and on the percentile interval; a difference both see is one neither produced
    by its own weak point. Use an interval at level 1 - alpha so both ask the same question.
    """
    low, high = ci
    if dm.p_value < alpha and high < 0 and dm.mean_diff < 0:
        return "better"
    if dm.p_value < alpha and low > 0 and dm.mean_diff > 0:
        return "worse"
    return "no significant difference"


def _score_table(scores) -> np.ndarray:
    table = np.asarray(scores, dtype=np.float64)
    if table.ndim != 2 or table.shape[0] < 1 or table.shape[1] < 2:
        raise ValueError(f"scores must be (N problems, k >= 2 methods), got shape {table.shape}")
    if not np.isfinite(table).all():
        raise ValueError("scores contain NaN or inf")
    return table


def average_ranks(scores: np.ndarray) -> np.ndarray:
    """Mean rank of each of k methods over N problems; scores are losses (rank 1 = lowest), ties share the
    average of their ranks."""
    return sps.rankdata(_score_table(scores), method="average", axis=1).mean(axis=0)


def friedman(scores) -> FriedmanResult:
    """Friedman test (with the tie correction, as scipy.stats.friedmanchisquare) and Iman-Davenport F.

    scores: (N problems, k methods), lower is better. N >= 2 so that the F has denominator degrees of
    freedom. If every problem ties all methods there is nothing to rank: chi2 0, p 1.
    """
    table = _score_table(scores)
    n, k = table.shape
    if n < 2:
        raise ValueError(f"Friedman needs at least 2 problems, got {n}")
    ranks = sps.rankdata(table, method="average", axis=1)
    tie_sizes = np.concatenate([np.unique(row, return_counts=True)[1] for row in table])
    tie_correction = 1 - (tie_sizes ** 3 - tie_sizes).sum() / (n * k * (k * k - 1))
    if tie_correction <= 0:
        return FriedmanResult(0.0, 1.0, 0.0, 1.0, n, k)
    rank_sums = ranks.sum(axis=0)
    chi2 = (12 / (n * k * (k + 1)) * (rank_sums ** 2).sum() - 3 * n * (k + 1)) / tie_correction
    p_value = float(sps.chi2.sf(chi2, k - 1))
    # chi2 reaches n(k-1) when every problem ranks the methods alike: F is then infinite
    spread = n * (k - 1) - chi2
    f_stat = (n - 1) * chi2 / spread if spread > 0 else np.inf
    f_p = float(sps.f.sf(f_stat, k - 1, (k - 1) * (n - 1)))
    return FriedmanResult(float(chi2), p_value, float(f_stat), f_p, n, k)


@lru_cache(maxsize=None)
def _nemenyi_q(k: int, alpha: float) -> float:
    """Demsar's q_alpha: the studentized range quantile for k groups and infinite df, over sqrt(2)."""
    return float(sps.studentized_range.ppf(1 - alpha, k, np.inf) / np.sqrt(2))


def nemenyi_cd(k: int, n: int, alpha: float = 0.05) -> float:
    """Critical difference of mean ranks for k methods over n problems: two methods whose mean ranks differ
    by at least this much differ significantly (Nemenyi post-hoc test, all pairs)."""
    if k < 2 or n < 1:
        raise ValueError(f"the critical difference needs k >= 2 methods and n >= 1 problems, got k={k}, n={n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    return _nemenyi_q(int(k), float(alpha)) * float(np.sqrt(k * (k + 1) / (6 * n)))


def _ranked(names: Sequence[str], ranks) -> tuple[list[str], np.ndarray]:
    """Names and mean ranks sorted best (lowest rank) first; a stable sort keeps tied methods in input order."""
    ranks = np.asarray(ranks, dtype=np.float64)
    if ranks.ndim != 1 or len(names) != ranks.size:
        raise ValueError(f"{len(names)} names for {ranks.size} ranks")
    order = np.argsort(ranks, kind="stable")
    return [names[i] for i in order], ranks[order]


def _clique_spans(ranks: np.ndarray, cd: float) -> list[tuple[int, int]]:
    """(first, last) positions in ranks (sorted ascending) of each maximal run spanning less than cd."""
    spans = []
    for first in range(len(ranks)):
        last = int(np.searchsorted(ranks, ranks[first] + cd, side="left")) - 1
        if last > first and (not spans or last > spans[-1][1]):  # else it lies inside the previous run
            spans.append((first, last))
    return spans


def cliques(names: Sequence[str], ranks, cd: float) -> list[tuple[str, ...]]:
    """Maximal groups of at least two methods whose mean ranks all differ by less than cd, best first.

    These are the bars of a CD diagram. A difference of exactly cd is significant (Demsar: "at least the
    critical difference"). A method significantly different from every other belongs to no group.
    """
    names, ranks = _ranked(names, ranks)
    return [tuple(names[first:last + 1]) for first, last in _clique_spans(ranks, cd)]


def cd_diagram(names: Sequence[str], ranks, cd: float, path: str | PathLike, title: str | None = None) -> None:
    """Write the critical-difference diagram (Demsar 2006, Fig. 1) as a PNG.

    The rank axis runs from 1 (best, on the left) to k; each method hangs from its mean rank with its name and
    rank, the better half labelled to the left and the rest to the right; a thick bar joins each group of
    methods not significantly different; the CD scale bar sits above the axis.
    """
    from matplotlib.figure import Figure  # lazily: only reports draw; a bare Figure renders with Agg

    names, ranks = _ranked(names, ranks)
    k = len(names)
    spans = _clique_spans(ranks, cd)
    bar_rows = -0.25 - 0.2 * np.arange(len(spans))
    label_top = (bar_rows[-1] if spans else -0.1) - 0.35
    fig = Figure(figsize=(max(6.0, 0.9 * k), 1.6 + 0.3 * (k + len(spans))))
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.hlines(0, 1, k, color="k", lw=1)
    for tick in range(1, k + 1):
        ax.vlines(tick, 0, 0.08, color="k", lw=1)
        ax.text(tick, 0.12, str(tick), ha="center", va="bottom", fontsize=9)
    ax.hlines(0.55, 1, 1 + cd, color="k", lw=1.2)
    ax.vlines([1, 1 + cd], 0.5, 0.6, color="k", lw=1.2)
    ax.text(1 + cd / 2, 0.63, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=9)
    left_half = (k + 1) // 2
    for i, (name, rank) in enumerate(zip(names, ranks)):
        on_left = i < left_half
        row = i if on_left else k - 1 - i  # outermost labels for the extreme methods, as in Demsar's figure
        y = label_top - 0.3 * row
        end = 0.5 if on_left else k + 0.5
        ax.plot([rank, rank, end], [0, y, y], color="k", lw=0.8)
        ax.text(end - 0.05 if on_left else end + 0.05, y, f"{name} ({rank:.2f})", ha="right" if on_left else "left",
                va="center", fontsize=9)
    pad = 0.04
    for y, (first, last) in zip(bar_rows, spans):
        ax.hlines(y, ranks[first] - pad, ranks[last] + pad, color="k", lw=4)
    ax.set_xlim(0.5, k + 0.5)
    ax.set_ylim(label_top - 0.3 * (left_half - 1) - 0.2, 0.9)
    if title:
        ax.set_title(title, fontsize=10)
    # a Figure outside pyplot is never registered, so nothing stays open once it is written
    write_atomic(str(path), lambda f: fig.savefig(f, format="png", dpi=150, bbox_inches="tight"))
