"""scripts.sweep: a grid of cells in long-lived workers equals the same runs one by one; resumable; failures."""
import csv
import os
import subprocess
import sys
import time

import pytest

import run
from scripts import sweep
from tests.conftest import REPO, metrics_of
from utils.errors import ConfigError


def test_an_axis_is_several_values_or_a_comma_list_and_list_valued_flags_stay_whole():
    cells = sweep.expand(["--model", "a,b", "--nonautoregressive", "--seed", "1", "2", "3", "--horizons", "1,8"],
                         whole={"--horizons"})
    assert len(cells) == 6 and cells[0] == ["--model", "a", "--nonautoregressive", "--seed", "1", "--horizons", "1,8"]
    assert [c[1] for c in cells] == ["a"] * 3 + ["b"] * 3 and [c[4] for c in cells[:3]] == ["1", "2", "3"]
    assert "--horizons" in sweep.list_valued_flags()  # Time-MoE's comma-list hyper-parameter
    with pytest.raises(ValueError, match="comes before any flag"):
        sweep.expand(["dlinear", "--seed", "1"])
    assert sweep.label(["--model", "x", "--data", "ETTh1", "--output_token_len", "96", "--seed", "3", "--seed", "4"]) \
        == "x_ETTh1_96_s4"  # the last value given wins, as in run.py


def test_the_time_to_table_benchmark_runs_tslib_at_the_paper_setting_once_per_horizon(tmp_path):
    from scripts.benchmark.time_to_table import tslib_commands
    (tmp_path / "ETT-small").mkdir()
    (tmp_path / "ETT-small" / "ETTh1.csv").write_text("date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT\n")
    commands = tslib_commands("dlinear", "ETTh1", 3, str(tmp_path))
    assert [c[c.index("--model=DLinear") + 1:][0] for c in commands] == ["--data=ETTh1"] * 4
    assert [next(f for f in c if f.startswith("--pred_len=")) for c in commands] == \
        [f"--pred_len={h}" for h in (96, 192, 336, 720)]
    for flag in ("--seq_len=336", "--batch_size=32", "--learning_rate=0.005", "--train_epochs=10", "--patience=3",
                 "--lradj=type1", "--itr=3", "--enc_in=7", "--c_out=7", "--no_use_gpu",
                 f"--root_path={tmp_path}/ETT-small/"):
        assert all(flag in c for c in commands), flag
    with pytest.raises(ConfigError, match="no TSLib translation of patchtst"):
        tslib_commands("patchtst", "ETTh1", 3, str(tmp_path))


def test_workers_are_one_per_core_without_a_gpu_and_nproc_gpus_each_with_them():
    import torch
    cores = os.cpu_count()
    if not torch.cuda.is_available():
        assert sweep.plan_workers(1, None) == (cores, 1, None)
    workers, threads, gpus = sweep.plan_workers(2, ["0", "1", "2", "3", "4"])
    assert (workers, gpus) == (2, [["0", "1"], ["2", "3"]]) and threads == max(cores // 5, 1)
    with pytest.raises(ConfigError, match="1 GPUs cannot run cells of --nproc 2"):
        sweep.plan_workers(2, ["0"])


def test_workers_beyond_the_gpus_share_them_in_turn():
    gpus = [["0", "1"], ["2", "3"]]
    assert [sweep.worker_gpus(gpus, w) for w in range(5)] == [gpus[0], gpus[1], gpus[0], gpus[1], gpus[0]]
    assert sweep.worker_gpus(None, 3) is None


def test_paper_cells_are_the_scripts_commands_with_the_data_root():
    from scripts import make_scripts
    cells, notes = sweep.paper_cells(["dlinear", "cyclenet"], ["ETTh1", "Exchange"], "/data")
    dlinear_etth1 = [c for c in cells if c[1] == "dlinear" and "ETTh1" in c]
    assert len(dlinear_etth1) == 4 and dlinear_etth1[0][:8] == [
        "--model", "dlinear", "--model_id", "ETTh1", "--data", "ETTh1", "--root_path", "/data/ETT-small/"]
    assert dlinear_etth1[0][8:] == make_scripts.run_flags("dlinear", "ETTh1", 96)[8:]
    assert notes == ["cyclenet has no paper setting on Exchange"]
    only, _ = sweep.paper_cells(["dlinear"], ["ILI"], "/data", horizons=[24, 96])
    assert [c[c.index("--output_token_len") + 1] for c in only] == ["24"]  # ILI has no horizon 96


@pytest.mark.slow
def test_a_grid_on_two_workers_equals_the_runs_one_by_one_resumes_and_reports_failures(tiny_args, tmp_path):
    common = ["--nonautoregressive", "--train_epochs", "1", *tiny_args[:6], "--seq_len", "48",
              "--output_token_len", "16", "--device", "cpu"]
    where = ["--results_dir", str(tmp_path / "sweep"), "--checkpoints", str(tmp_path / "sweep_ckpt")]
    # part of the grid run before, one by one: the sweep skips those cells
    before = {seed: run.main(["--model", "nlinear", "--seed", str(seed), *common, *where])[0]["metrics"]
              for seed in (1, 2)}
    written = {seed: os.stat(tmp_path / "sweep" / m["setting"] / m["test"] / "metrics.json").st_mtime_ns
               for seed, m in before.items()}
    proc = subprocess.run([sys.executable, "-m", "scripts.sweep", "--workers", "2", "--quiet", "--model",
                           "dlinear,nlinear,no_such_model", "--seed", "1", "2", *common, *where],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]  # a failed cell: the others ran, the exit code says so
    assert "leaked semaphore" not in proc.stderr  # the resource tracker's warning at exit
    outcomes = {row["cell"]: row for row in csv.DictReader(open(tmp_path / "sweep" / "sweep" / "cells.csv"))}
    assert [o["outcome"] for o in outcomes.values()] == ["done", "done", "skipped", "skipped", "failed", "failed"]
    assert "unknown model 'no_such_model'" in outcomes["004_no_such_model_custom_16_s1"]["error"]
    assert "failed: 004_no_such_model_custom_16_s1: ConfigError: unknown model" in proc.stderr
    assert "2 run (beyond their epochs" in proc.stdout and "2 already done, 2 failed" in proc.stdout and "| dlinear | 48 | 2:" in proc.stdout  # the report
    assert os.path.getsize(tmp_path / "sweep" / "sweep" / "logs" / "000_dlinear_custom_16_s1.log") > 0
    swept = {(m["model"], m["seed"]): m for m in metrics_of(tmp_path / "sweep")}
    assert sorted(swept) == [("dlinear", 1), ("dlinear", 2), ("nlinear", 1), ("nlinear", 2)]
    for seed, m in before.items():  # skipped cells are left as they were
        assert swept["nlinear", seed]["mse"] == m["mse"]
        assert os.stat(tmp_path / "sweep" / m["setting"] / m["test"] / "metrics.json").st_mtime_ns == written[seed]
    # the cells the sweep ran, run one by one with run.py: the same runs, the same metrics
    for seed in (1, 2):
        alone = run.main(["--model", "dlinear", "--seed", str(seed), *common, "--results_dir",
                          str(tmp_path / "alone"), "--checkpoints", str(tmp_path / "alone_ckpt")])[0]["metrics"]
        assert alone["setting"] == swept["dlinear", seed]["setting"]
        for k in ("mse", "mae"):
            assert alone[k] == pytest.approx(swept["dlinear", seed][k], rel=1e-6), (seed, k)


@pytest.mark.slow
def test_a_job_array_through_submitits_local_executor_skips_runs_and_fails_cells_alone(tiny_args, tmp_path):
    common = ["--nonautoregressive", "--train_epochs", "1", *tiny_args[:6], "--seq_len", "48", "--output_token_len",
              "16", "--device", "cpu", "--results_dir", str(tmp_path / "r"), "--checkpoints", str(tmp_path / "c")]
    run.main(["--model", "dlinear", "--seed", "1", *common])  # done before: the array task skips it
    results = sweep.main(["--submit", "local", "--tasks", "2", "--threads", "1", "--model", "dlinear,no_such_model",
                          "--seed", "1,2", *common])
    assert [r.status for r in results] == ["skipped", "done", "failed", "failed"]
    assert sorted(m["seed"] for m in metrics_of(tmp_path / "r")) == [1, 2]
    rows = list(csv.DictReader(open(tmp_path / "r" / "sweep" / "cells.csv")))
    assert [r["outcome"] for r in rows] == ["skipped", "done", "failed", "failed"]
    assert os.path.isdir(tmp_path / "r" / "sweep" / "submitit")  # the array's own logs and pickles


@pytest.mark.slow
def test_ddp_cells_run_as_torchrun_jobs_and_count_as_done_at_their_world_size(tiny_args, tmp_path):
    common = ["--model", "dlinear", "--nonautoregressive", "--train_epochs", "1", *tiny_args[:6], "--seq_len", "48",
              "--output_token_len", "16", "--device", "cpu", "--results_dir", str(tmp_path / "r"),
              "--checkpoints", str(tmp_path / "c")]
    first = sweep.main(["--quiet", "--workers", "1", "--nproc", "2", "--threads", "1", *common])
    assert [r.status for r in first] == ["done"], first
    (m,) = metrics_of(tmp_path / "r")
    assert m["world_size"] == 2 and m["test_world_size"] == 2
    # found done at world size 2, not at 1 (where another run of this configuration would train)
    assert sweep.finished([*common, "--resume", "auto"], 2) and not sweep.finished([*common, "--resume", "auto"], 1)


def _workers_of(parent: int) -> list:
    """The pids of the multiprocessing workers a process has started (Linux /proc)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat, cmdline = open(f"/proc/{pid}/stat").read(), open(f"/proc/{pid}/cmdline").read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and "spawn_main" in cmdline:
            found.append(int(pid))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_sweep_takes_its_workers_with_it(tiny_args, tmp_path):
    """SIGKILL skips the sweep's clean-up: its worker must still end, not go on through the queued cells (a sweep
    run again would then train them twice at once)."""
    import signal
    sweep_cmd = [sys.executable, "-m", "scripts.sweep", "--workers", "1", "--quiet", "--model", "dlinear",
                 "--nonautoregressive", "--seed", "1,2,3", "--train_epochs", "1000", "--patience", "1000",
                 *tiny_args[:6], "--seq_len", "48", "--output_token_len", "16", "--device", "cpu",
                 "--results_dir", str(tmp_path / "r"), "--checkpoints", str(tmp_path / "c")]
    proc = subprocess.Popen(sweep_cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    logs, deadline = tmp_path / "r" / "sweep" / "logs", time.time() + 120
    while not (logs.is_dir() and any("epoch 2/" in f.read_text() for f in logs.iterdir())):
        assert time.time() < deadline and proc.poll() is None, "the first cell never got to its second epoch"
        time.sleep(0.2)
    workers = _workers_of(proc.pid)
    assert len(workers) == 1
    os.kill(proc.pid, signal.SIGKILL)
    assert "leaked semaphore" not in proc.communicate()[1]  # nothing the killed sweep held is left behind
    deadline = time.time() + 20
    while any(os.path.exists(f"/proc/{w}") for w in workers) and time.time() < deadline:
        time.sleep(0.2)
    assert not any(os.path.exists(f"/proc/{w}") for w in workers), "the worker outlived its sweep"
    assert len(list(logs.iterdir())) == 1  # no queued cell was started


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_interrupted_sweep_has_recorded_the_cells_it_finished(tiny_args, tmp_path):
    """Each cell's outcome is in cells.csv as soon as it finishes: the second cell is still training when the first
    is there. Ctrl-C then stops the worker and the sweep says in one line what is done."""
    import signal
    proc = subprocess.Popen([sys.executable, "-m", "scripts.sweep", "--workers", "1", "--quiet", "--model", "dlinear",
                             "--nonautoregressive", "--train_epochs", "1,1000", "--patience", "1000", *tiny_args[:6],
                             "--seq_len", "48", "--output_token_len", "16", "--device", "cpu", "--results_dir",
                             str(tmp_path / "r"), "--checkpoints", str(tmp_path / "c")],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    cells, deadline = tmp_path / "r" / "sweep" / "cells.csv", time.time() + 120
    while not cells.exists():
        assert time.time() < deadline and proc.poll() is None, "the first cell was never recorded"
        time.sleep(0.2)
    assert [(r["cell"], r["outcome"]) for r in csv.DictReader(open(cells))] == [("000_dlinear_custom_16", "done")]
    workers = _workers_of(proc.pid)
    os.kill(proc.pid, signal.SIGINT)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130, err[-3000:]
    assert err.strip() == f"interrupted: 1 of 2 cells finished, their outcomes in {cells}; the same command again " \
        "runs the rest"  # no traceback, no warning of leaked semaphores
    assert len(workers) == 1 and not os.path.exists(f"/proc/{workers[0]}")


@pytest.mark.slow
def test_a_worker_killed_from_outside_fails_its_cell_and_the_others_finish(repo_copy, tiny_args, tmp_path):
    (repo_copy / "models" / "dies.py").write_text(
        "import os\nfrom torch import nn\nfrom models.base import Capabilities\n\n\nclass Model(nn.Module):\n"
        "    capabilities = Capabilities(direct=True, covariate=False)\n\n    def __init__(self, configs):\n"
        "        super().__init__()\n        os._exit(9)  # as the kernel's OOM killer would end it\n")
    proc = subprocess.run([sys.executable, "-m", "scripts.sweep", "--workers", "2", "--quiet", "--model",
                           "dlinear,dies,nlinear", "--nonautoregressive", "--train_epochs", "1", *tiny_args[:6],
                           "--seq_len", "48", "--output_token_len", "16", "--device", "cpu", "--results_dir",
                           str(tmp_path / "r"), "--checkpoints", str(tmp_path / "c")],
                          cwd=repo_copy, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    rows = list(csv.DictReader(open(tmp_path / "r" / "sweep" / "cells.csv")))
    assert [(r["outcome"], r["error"]) for r in rows] == [
        ("done", ""), ("failed", "its worker died (exit code 9)"), ("done", "")]
