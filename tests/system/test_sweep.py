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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_an_interrupted_sweep_has_recorded_the_cells_it_finished(tiny_args, tmp_path):
    """Each cell's outcome is in cells.csv as soon as it finishes: the second cell is still training when the first
    is there. Ctrl-C then stops the worker and the sweep says in one line what is done."""
    import signal
    proc = subprocess.Popen([sys.executable, "-m", "scripts.sweep", "--workers", "1", "--quiet", "--model", "dlinear",
                             "--nonautoregressive", "--train_epochs", "1,1000", "--patience", "1000", *tiny_args[:6],
                             "--seq_len", "48", "--output_token_len", "16", "--device", "cpu", "--results_dir",
                             str(tmp_path / "r"), "--checkpoints", str(tmp_path / "c")],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            # as from a terminal: a suite started in the background (`... &`) ignores SIGINT, and a
                            # program started with it ignored never sees Ctrl-C
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
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
