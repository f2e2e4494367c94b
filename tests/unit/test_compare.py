"""analysis.compare: two models' runs compared window by window, and many models ranked over many tests."""
import numpy as np
import pytest

from analysis import compare, stats


def _fake_groups(table: dict) -> dict:
    """load_runs' groups from {(dataset, horizon): {model: [mse of each seed]}}."""
    groups = {}
    for (dataset, horizon), by_model in table.items():
        for model, mses in by_model.items():
            key = (f"{model}-{dataset}-{horizon}", f"tp{horizon}")
            groups[key] = [{"model": model, "dataset": dataset, "test": f"tp{horizon}", "test_pred_len": horizon,
                            "config_id": key[0], "mse": mse} for mse in mses]
    return groups


def test_ranks_friedman_and_the_critical_difference_over_the_tests_every_model_ran(tmp_path):
    table = {("ETTh1", h): {"a": [0.30 + h / 1e5], "b": [0.35, 0.33], "c": [0.40]}
             for h in (96, 192, 336, 720)}
    table["ETTh2", 96] = {"a": [0.2], "b": [0.1]}  # c never ran it: left out, and said so
    plot = tmp_path / "cd.png"
    result = compare.rank_models(_fake_groups(table), {}, ["a", "b", "c"], plot=str(plot))
    scores = np.array([[0.30 + h / 1e5, 0.34, 0.40] for h in (96, 192, 336, 720)])
    assert result["ranks"] == pytest.approx(stats.average_ranks(scores))
    assert list(result["ranks"]) == [1.0, 2.0, 3.0]
    assert result["friedman"] == stats.friedman(scores) and result["cd"] == stats.nemenyi_cd(3, 4)
    assert result["skipped"] == ["ETTh2 tp96 (no run of c)"]
    assert plot.stat().st_size > 0
    text = compare.ranks_text(result, "mse", 0.05)
    assert "| a | 1.00 |" in text and "Friedman chi2 8.000" in text and "Left out: ETTh2 tp96" in text
