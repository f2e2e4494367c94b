"""The benchmark scripts run: they call the training loop's internals, which a refactor can move from under them
(the throughput benchmark's `ours` called a method that training by steps had removed, and nothing failed)."""
import os
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


FAKE_TSLIB = '''import sys
flags = dict(zip(sys.argv[1::2], sys.argv[2::2]))
assert flags["--data"] == "ETTh1" and flags["--train_epochs"] == "2" and "--no_use_gpu" in sys.argv, sys.argv
if flags["--model"] == "PatchTST":
    assert (flags["--d_model"], flags["--d_ff"], flags["--e_layers"], flags["--n_heads"]) == ("512", "2048", "1", "2")
print("Epoch: 1 cost time: 9.0")
print("Epoch: 2 cost time: 2.0")
'''


def test_the_gpu_check_runs_every_part_on_the_cpu_and_writes_its_json_and_table(tmp_path):
    """The GPU check's own run in the suite (issue 49): --device cpu, tiny sizes; TSLib's loop is a stand-in that
    checks the flags it is given and reports an epoch of 2 s."""
    import json
    tslib = tmp_path / "tslib"
    tslib.mkdir()
    (tslib / "run.py").write_text(FAKE_TSLIB)
    out = subprocess.run([sys.executable, "-m", "scripts.benchmark.gpu_check", "--out", str(tmp_path / "out"),
                          "--device", "cpu", "--tiny", "--models", "dlinear,timer_xl", "--compile_models", "dlinear",
                          "--steps", "2", "--throughput_steps", "2", "--rounds", "1", "--fsdp_steps", "1",
                          "--tslib", str(tslib), "--commit", "abc1234"],
                         cwd=REPO, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    found = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert found["machine"]["commit"] == "abc1234" and found["machine"]["device_type"] == "cpu"
    runs = {(r["model"], r["precision"]): r for r in found["models"]}
    assert set(runs) == {(m, p) for m in ("dlinear", "timer_xl") for p in ("fp32", "fp16", "bf16")} | \
        {("dlinear", "compile")}
    for key, r in runs.items():
        assert r["status"] == "ok" and r["step_ms"] > 0 and r["test_mse"] > 0, (key, r)
    assert runs["dlinear", "fp16"]["test_mse"] != runs["dlinear", "fp32"]["test_mse"], "fp16 autocast was applied"
    speed = {r["model"]: r for r in found["throughput"]}
    assert set(speed) == {"dlinear", "patchtst", "itransformer", "timer_xl", "autoformer"}
    assert all(r["status"] == "ok" and r["ours_windows_s"] > 0 and r["limit_windows_s"] > 0 for r in speed.values())
    for r in speed.values():
        low, high = r["ours_over_limit_interval"]
        assert low <= r["ours_over_limit_median"] <= high and isinstance(r["host_extra_us"], dict)
    windows = 8449  # ETTh1's training windows at lookback 96 and horizon 96
    assert speed["dlinear"]["tslib_windows_s"] == pytest.approx(windows / 2.0)
    assert "tslib_windows_s" not in speed["timer_xl"], "TSLib has no Timer-XL"
    sharded = {r["configuration"]: r for r in found["fsdp"]}
    assert sharded["plain"]["status"] == "ok" and "plain_test_mse" not in sharded["plain"], "nothing sharded to test"
    for config in ("fsdp", "fsdp_ac", "patchtst_fsdp"):
        assert sharded[config]["status"] == "ok", sharded[config]
        assert sharded[config]["plain_test_mse"] == pytest.approx(sharded[config]["test_mse"], rel=1e-4)
    assert sharded["patchtst_fsdp"]["model"] == "patchtst"
    for config in ("fsdp_offload", "fsdp_offload_ac", "patchtst_fsdp_offload"):
        assert sharded[config]["status"] == "skipped: --cpu_offload needs CUDA"
    assert found["goals"]["amp_every_model_finite"] == "met"
    assert sorted(os.listdir(tmp_path / "out")) == ["gpu_check.json", "gpu_check.md"], "the runs go elsewhere"
    table = (tmp_path / "out" / "gpu_check.md").read_text()
    assert "commit abc1234" in table and "| dlinear | compile |" in table and "## Goals" in table
    assert "Host time our loop adds per step" in table
    # the rest of a cut-off run: the rows kept, only what is missing run
    again = subprocess.run([sys.executable, "-m", "scripts.benchmark.gpu_check", "--out", str(tmp_path / "out"),
                            "--device", "cpu", "--tiny", "--parts", "models", "--models", "dlinear,nlinear",
                            "--precisions", "fp32", "--compile_models", "", "--steps", "2", "--append"],
                           cwd=REPO, capture_output=True, text=True, timeout=600,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert again.returncode == 0, again.stderr[-3000:]
    appended = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert appended["models"][:-1] == found["models"] and appended["fsdp"] == found["fsdp"]
    assert appended["models"][-1]["model"] == "nlinear" and appended["models"][-1]["status"] == "ok"
