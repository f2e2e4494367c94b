import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):  # -n 2: the workers share the cores, one thread each (read by torch)
    os.environ["OMP_NUM_THREADS"] = "1"

from data_provider import synthetic  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="session", autouse=True)
def fingerprint_cache(tmp_path_factory):
    """The file-fingerprint cache of every test (and the processes it starts) in a folder of the session."""
    os.environ["TSF_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    return os.environ["TSF_CACHE_DIR"]


def write_m4(path, rows) -> None:
    """An M4 competition file: a header of V1, V2, ..., then a row per (id, values), shorter rows padded with
    empty cells."""
    width = max(len(values) for _, values in rows)
    with open(path, "w") as f:
        f.write(",".join(f'"V{i + 1}"' for i in range(width + 1)) + "\n")
        for name, values in rows:
            f.write(",".join([f'"{name}"', *(f"{v:.10g}" for v in values), *[""] * (width - len(values))]) + "\n")


def m4_files(root, subset: str, train: list, test: list) -> None:
    """<subset>-train.csv and <subset>-test.csv under root, series ids M1, M2, ..."""
    write_m4(os.path.join(root, f"{subset}-train.csv"), [(f"M{i + 1}", x) for i, x in enumerate(train)])
    write_m4(os.path.join(root, f"{subset}-test.csv"), [(f"M{i + 1}", y) for i, y in enumerate(test)])


def m4_like(n: int, horizon: int, period: int, lengths: tuple, seed: int = 0) -> tuple:
    """(training series, test values): n positive series of seeded random lengths in [lengths), a level, a trend
    and a cycle of `period` steps with noise, each followed by `horizon` test values."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for i in range(n):
        t = np.arange(int(rng.integers(*lengths)) + horizon)
        x = 100 + 5 * i + 0.1 * (i % 5) * t + 10 * np.sin(2 * np.pi * t / period + i) + rng.normal(0, 1, len(t))
        train.append(x[:-horizon])
        test.append(x[-horizon:])
    return train, test


@pytest.fixture(scope="session")
def tiny_csv(tmp_path_factory):
    """602 hourly rows: 358 train, 46 validation and 105 test windows with the tiny settings below."""
    path = tmp_path_factory.mktemp("data") / "tiny.csv"
    synthetic.write_csv(synthetic.generate(length=602, n_covariates=2, seed=1), str(path))
    return path


@pytest.fixture
def tiny_args(tiny_csv, tmp_path):
    """run.py flags for a Timer-XL that trains in about a second, writing into this test's tmp folder."""
    return ["--data", "custom", "--root_path", str(tiny_csv.parent), "--data_path", tiny_csv.name,
            "--seq_len", "48", "--input_token_len", "16", "--output_token_len", "16",
            "--d_model", "16", "--d_ff", "32", "--n_heads", "2", "--e_layers", "1",
            "--batch_size", "16", "--train_epochs", "2", "--device", "cpu",
            "--checkpoints", str(tmp_path / "ckpt"), "--results_dir", str(tmp_path / "results")]


@pytest.fixture(scope="session")
def weather(tmp_path_factory):
    """A 3-channel weather.csv every 10 minutes, 400 rows."""
    root = tmp_path_factory.mktemp("weather")
    rng = np.random.default_rng(0)
    t = np.arange(400)
    frame = pd.DataFrame({"p": np.sin(t / 9) + rng.normal(0, .1, 400), "T": np.cos(t / 14) + rng.normal(0, .1, 400),
                          "OT": np.sin(t / 6) + rng.normal(0, .1, 400)})
    frame.insert(0, "date", pd.date_range("2020-01-01", periods=400, freq="10min"))
    frame.to_csv(root / "weather.csv", index=False)
    return root


@pytest.fixture(scope="session")
def command_paths(tmp_path_factory):
    """Folders the entry points' bad-input tests name: {missing}, {empty}, {series} (three .npy series), {out}."""
    root = tmp_path_factory.mktemp("entry_points")
    for name in ("empty", "series", "out"):
        (root / name).mkdir()
    for i in range(3):
        np.save(root / "series" / f"s{i}.npy", np.random.default_rng(i).standard_normal(200).astype(np.float32))
    return {"missing": str(root / "missing"), **{name: str(root / name) for name in ("empty", "series", "out")}}


def elsewhere(tmp_path, name) -> list:
    """Flags that give a run its own checkpoints and results folders (a second run of one identity would be
    refused as already finished)."""
    return ["--checkpoints", str(tmp_path / name / "ckpt"), "--results_dir", str(tmp_path / name / "results")]


def start_process(cmd, env, cwd) -> subprocess.Popen:
    """A process in a group of its own (killpg ends torchrun and all its workers), its output captured."""
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(cwd),
                            start_new_session=True)


def run_process(cmd, timeout, env, cwd) -> subprocess.CompletedProcess:
    """subprocess.run that, on timeout, kills the whole process group: torchrun and all its workers."""
    proc = start_process(cmd, env, cwd)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def torchrun(args, out_dir, nproc=2, timeout=240, extra=(), env=None):
    """Run run.py's main() under a real torchrun launch; each rank dumps its results to out_dir/rank<r>.json.

    Returns (completed process, list of per-rank results ordered by rank; empty if the run failed).
    """
    os.makedirs(out_dir, exist_ok=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *extra,
           os.path.join(REPO, "tests", "ddp_worker.py"), str(out_dir), "--ddp", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO, **(env or {})}
    proc = run_process(cmd, timeout, env, out_dir)
    files = sorted(f for f in os.listdir(out_dir) if f.startswith("rank") and f.endswith(".json"))
    ranks = [json.load(open(os.path.join(out_dir, f))) for f in files]
    return proc, ranks


def _forked_rank(rank: int, nproc: int, port: int, out_dir: str, args: list, env: dict) -> None:
    """One rank in a child forked from the test process: torchrun's environment, its output in rank<r>.log."""
    log = open(os.path.join(out_dir, f"rank{rank}.log"), "w", buffering=1)
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    sys.stdout = sys.stderr = log
    code = 1
    try:
        os.environ.update({**env, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
                           "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        import torch
        torch.set_num_threads(1)  # the parent's thread pool does not survive the fork; one thread needs none
        from tests import ddp_worker
        ddp_worker.main(out_dir, ["--ddp", *args])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        log.flush()
        os._exit(code)


def forked_ranks(args, out_dir, nproc=2, timeout=240, env=None):
    """torchrun(...) without torchrun: nproc ranks forked from this process, which has imported torch and the
    project already, so a launch costs no start-up (a torchrun launch spends ~10 CPU seconds importing torch in
    three processes). The DDP code path is the same; tests of the launch itself (restarts, signals, rendezvous)
    use torchrun. Returns (CompletedProcess with the ranks' combined output as stderr, per-rank results)."""
    import multiprocessing
    import socket
    os.makedirs(out_dir, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fork = multiprocessing.get_context("fork")
    env = {"OMP_NUM_THREADS": "1", **(env or {})}
    procs = [fork.Process(target=_forked_rank, args=(r, nproc, port, str(out_dir), list(args), env))
             for r in range(nproc)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(deadline - time.monotonic(), 0))
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.kill()
        p.join()
    stderr = "".join(open(os.path.join(out_dir, f"rank{r}.log")).read() for r in range(nproc))
    if alive:
        raise subprocess.TimeoutExpired("forked ranks", timeout, stderr=stderr)
    code = next((p.exitcode for p in procs if p.exitcode), 0)
    files = sorted(f for f in os.listdir(out_dir) if f.startswith("rank") and f.endswith(".json"))
    ranks = [json.load(open(os.path.join(out_dir, f))) for f in files]
    return subprocess.CompletedProcess("forked ranks", code, "", stderr), ranks


def run_cli(args, cwd, timeout=240, nproc=None, repo=REPO, env=None):
    """run.py as a user runs it (python run.py ... or torchrun ... run.py --ddp ...)."""
    if nproc:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               os.path.join(repo, "run.py"), "--ddp", *args]
    else:
        cmd = [sys.executable, os.path.join(repo, "run.py"), *args]
    return run_process(cmd, timeout, {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, cwd)


@pytest.fixture
def repo_copy(tmp_path):
    """A copy of the project's code, for tests that add or break a file in it."""
    copy = tmp_path / "repo"
    shutil.copytree(REPO, copy, ignore=shutil.ignore_patterns(".git", ".venv*", "__pycache__", "dataset", "results",
                                                               "checkpoints", "*.pyc"))
    return copy


def run_dirs(results_dir) -> list:
    """The run folders under a results dir (each holds history.csv and one folder per test; .locks holds the
    runs' locks)."""
    return sorted(p for p in results_dir.iterdir() if p.is_dir() and not p.name.startswith("."))


def metrics_of(results_dir, test="tp16") -> list:
    """metrics.json of every run's given test under results_dir."""
    return [json.load(open(d / test / "metrics.json")) for d in run_dirs(results_dir) if (d / test).is_dir()]


def pytest_collection_modifyitems(items):
    """The layers are folders: unit/ (functions and objects, fakes of (rank, world)), integration/ (run.py and the
    other entry points called in this process, on generated data, a few seconds each), system/ (runs as users
    launch them: torchrun, forked ranks, subprocesses, and the longer trainings that compare whole runs): the slow
    tier."""
    for item in items:
        if item.path.parent.name == "system":
            item.add_marker(pytest.mark.slow)
