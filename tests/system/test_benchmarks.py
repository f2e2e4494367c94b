"""The benchmark scripts run: they call the training loop's internals, which a refactor can move from under them
(the throughput benchmark's `ours` called a method that training by steps had removed, and nothing failed)."""
import re
import subprocess
import sys

import pytest

from data_provider import synthetic
from tests.conftest import REPO


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    """A folder holding an ETTh1-shaped file: the project's synthetic series with ETTh1's 7 columns and the
    14,400 hourly rows of its standard split."""
    root = tmp_path_factory.mktemp("datasets")
    (root / "ETT-small").mkdir()
    synthetic.write_csv(synthetic.generate(length=14400, n_covariates=6), str(root / "ETT-small" / "ETTh1.csv"))
    return root


def test_the_throughput_benchmark_measures_our_loop_against_the_model_only_limit_and_the_field_standard(data_root):
    out = subprocess.run([sys.executable, "scripts/benchmark/throughput.py", "--data_root", str(data_root),
                          "--steps", "2", "--skip_cli", "--skip_options", "--models", "dlinear", "sparsetsf"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    for model in ("dlinear", "sparsetsf"):
        section = out.stdout.split(f"== {model} ")[1].split("\n== ")[0]
        for line in ("ours:", "model-only limit:", "field-standard:"):
            windows_per_second = float(re.search(rf"{line}\s+([\d.]+) windows/s", section).group(1))
            assert windows_per_second > 0, (model, line)
        assert re.search(r"ours / limit time: median of \d+ paired rounds [\d.]+", section)
        assert re.search(r"validation \+ test: [\d.]+ s", section)


def test_each_throughput_measurement_cuts_its_steps_from_the_whole_epoch(data_root):
    """A pass once left its cut loader in the trainer, so the option speeds timed 3 warm-up steps as 30."""
    import torch

    from scripts.benchmark import throughput
    exp, args = throughput.make_exp("dlinear", str(data_root), torch.device("cpu"))
    assert throughput.ours(exp, 3)[1] == 3 * args.batch_size
    assert throughput.ours(exp, 5)[1] == 5 * args.batch_size
    assert throughput.fetch_only(exp, None) > 0 and len(exp.trainer.loader) > 5


def test_the_paper_cost_benchmark_times_each_paper_script_and_scales_it_to_an_epoch_and_a_run(data_root):
    out = subprocess.run([sys.executable, "-m", "scripts.benchmark.paper_cost", "--models", "dlinear,sparsetsf",
                          "--data_root", str(data_root), "--horizons", "96,720", "--steps", "2", "--threads", "1"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.strip("|").split("|") for line in out.stdout.splitlines()
            if re.match(r"\| (dlinear|sparsetsf) ", line)]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [("dlinear", "96"), ("dlinear", "720"),
                                                           ("sparsetsf", "96"), ("sparsetsf", "720")]
    # ETTh1's train split is 8,640 rows: 8,640 - lookback - horizon + 1 windows, whole batches only
    expected = {("dlinear", "96"): (256, 10), ("dlinear", "720"): (237, 10),  # lookback 336, batch 32
                ("sparsetsf", "96"): (30, 30), ("sparsetsf", "720"): (28, 30)}  # lookback 720, batch 256
    for model, horizon, _, step, steps_per_epoch, _, _, epochs, run_hours in rows:
        assert (int(steps_per_epoch), int(epochs)) == expected[model.strip(), horizon.strip()]
        assert float(step) > 0 and float(run_hours) > 0


def test_the_probabilistic_benchmark_times_a_quantile_head_and_the_metrics_against_the_point_ones(data_root):
    out = subprocess.run([sys.executable, "-m", "scripts.benchmark.probabilistic", "--models", "dlinear",
                          "--data_root", str(data_root), "--steps", "2", "--repeats", "1"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(r"train 2 steps: point model [\d.]+ s, quantile head [\d.]+ s \(x[\d.]+\)", out.stdout)
    for run in ("point run test", "quantile run test"):
        assert re.search(rf"{run}: point metrics [\d.]+ s, every metric [\d.]+ s \(x[\d.]+\)", out.stdout)
