"""Resume, elastic restarts, checkpoint safety, multi-node, and failures that must never hang."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import run
from tests.conftest import REPO, run_cli, torchrun
from utils import checkpoint
from utils.errors import ConfigError, TrainingError

METRICS = ("mse", "mae", "rmse", "mape", "mspe")


def _same_metrics(a, b, rel=1e-6):
    for k in METRICS:
        assert a[k] == pytest.approx(b[k], rel=rel), k


# ---- resume ---------------------------------------------------------------------------------------
def test_resume_auto_continues_an_interrupted_run_exactly(tiny_args, tmp_path):
    """Dropout stays on: equality needs the random states restored too."""
    args = tiny_args + ["--lradj", "type1", "--resume", "auto"]
    whole = run.main(args + ["--train_epochs", "4", "--checkpoints", str(tmp_path / "a")])[0]
    run.main(args + ["--train_epochs", "2", "--checkpoints", str(tmp_path / "b")])
    resumed = run.main(args + ["--train_epochs", "4", "--checkpoints", str(tmp_path / "b")])[0]
    assert [h["epoch"] for h in resumed["history"]] == [1, 2, 3, 4]
    assert [h["vali_loss"] for h in resumed["history"]] == [h["vali_loss"] for h in whole["history"]]
    _same_metrics(resumed["metrics"], whole["metrics"], rel=1e-9)


def test_resume_from_an_explicit_path_and_a_missing_one(tiny_args, tmp_path):
    run.main(tiny_args + ["--train_epochs", "1"])
    (last,) = list((tmp_path / "ckpt").glob("*/last.pth"))
    state = checkpoint.load(str(last), torch.device("cpu"))
    assert {"model", "optimizer", "scheduler", "scaler", "epoch", "step", "early_stopping", "history", "rng",
            "args"} <= set(state)
    resumed = run.main(tiny_args + ["--train_epochs", "2", "--resume", str(last)])[0]
    assert len(resumed["history"]) == 2
    with pytest.raises(ConfigError, match="no such checkpoint"):
        run.main(tiny_args + ["--resume", str(tmp_path / "nope.pth")])


def test_a_killed_worker_is_restarted_by_torchrun_and_resumes(tiny_args, tmp_path):
    """SIGKILL one of two workers in epoch 3; torchrun restarts the group, which resumes after epoch 2."""
    args = tiny_args + ["--train_epochs", "4", "--lradj", "type1", "--resume", "auto"]
    marker = tmp_path / "victim.pid"
    out = tmp_path / "elastic"
    os.makedirs(out)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "--max-restarts=3",
           os.path.join(REPO, "tests", "ddp_worker.py"), str(out), "--ddp", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO, "PAUSE_AT": f"1:3:5:{marker}"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(out),
                            start_new_session=True)
    try:
        deadline = time.time() + 120
        while not marker.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert marker.exists(), "the worker never reached epoch 3"
        os.kill(int(marker.read_text()), signal.SIGKILL)
        _, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, stderr[-3000:]
    assert "resumed from" in stderr and "epoch 2 done" in stderr
    ranks = [json.loads((out / f"rank{r}.json").read_text())[0] for r in range(2)]
    assert [r["restarts"] for r in ranks] == [1, 1], "one restart of the whole group"
    _, whole = torchrun(tiny_args + ["--train_epochs", "4", "--lradj", "type1", "--checkpoints",
                                     str(tmp_path / "w")], tmp_path / "whole")
    assert [h["epoch"] for h in ranks[0]["history"]] == [1, 2, 3, 4]
    _same_metrics(ranks[0]["metrics"], whole[0][0]["metrics"])


# ---- checkpoint safety ----------------------------------------------------------------------------
CRASH_MID_SAVE = """
import os, signal, sys, torch
sys.path.insert(0, {repo!r})
from utils import checkpoint
checkpoint.save_atomic({{"w": torch.ones(3), "epoch": 1}}, {path!r})
real_save = torch.save
def crash(obj, f, *a, **k):
    f.write(b"PK\\x03\\x04 half a checkpoint")
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)
torch.save = crash
checkpoint.save_atomic({{"w": torch.zeros(3), "epoch": 2}}, {path!r})
"""


def test_a_crash_in_the_middle_of_a_save_leaves_the_last_good_checkpoint(tmp_path):
    path = str(tmp_path / "checkpoint.pth")
    proc = subprocess.run([sys.executable, "-c", CRASH_MID_SAVE.format(repo=REPO, path=path)], capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    state = checkpoint.load(path, torch.device("cpu"))
    assert state["epoch"] == 1 and torch.equal(state["w"], torch.ones(3))


class _RunsCode:
    def __reduce__(self):
        return os.system, (f"touch {os.environ['PWNED']}",)


def test_a_checkpoint_that_would_run_code_is_refused(tiny_args, tmp_path, monkeypatch):
    monkeypatch.setenv("PWNED", str(tmp_path / "pwned"))
    evil = tmp_path / "ckpt" / "evil" / "checkpoint.pth"
    os.makedirs(evil.parent)
    torch.save({"model": _RunsCode()}, evil)
    with pytest.raises(ConfigError, match="refusing to load"):
        checkpoint.load(str(evil), torch.device("cpu"))
    proc = run_cli(tiny_args + ["--is_training", "0", "--test_dir", "evil"], tmp_path)
    assert proc.returncode == 2 and "refusing to load" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "pwned").exists()


def test_pretrained_weights_load_from_checkpoints_and_prefixed_state_dicts(tiny_args, tmp_path):
    from utils.args import parse_args, validate
    from data_provider.factory import build_data
    trained = run.main(tiny_args + ["--train_epochs", "1"])[0]
    ckpt = trained["metrics"]["checkpoint"]
    weights = checkpoint.load(ckpt, torch.device("cpu"))["model"]
    prefixed = tmp_path / "prefixed.pth"
    torch.save({f"module.{k}": v for k, v in weights.items()}, prefixed)
    for source in (ckpt, str(prefixed)):
        args = parse_args(tiny_args + ["--adaptation", "--pretrain_model_path", source])
        validate(args)
        data = build_data(args, torch.device("cpu"), True, False)
        model = run.build_model(args, data)
        for k, v in model.state_dict().items():
            assert torch.equal(v, weights[k]), k
    finetuned = run.main(tiny_args + ["--train_epochs", "1", "--adaptation", "--pretrain_model_path", str(prefixed),
                                      "--model_id", "finetune"])[0]
    assert finetuned["history"][0]["vali_loss"] < trained["history"][0]["vali_loss"]
    torch.save({"not_a_weight": torch.ones(1)}, tmp_path / "other.pth")
    with pytest.raises(ConfigError, match="does not match the model"):
        run.main(tiny_args + ["--adaptation", "--pretrain_model_path", str(tmp_path / "other.pth")])


# ---- multi-node -----------------------------------------------------------------------------------
def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_on_loopback_train_like_one_node_of_two(tiny_args, tmp_path):
    endpoint = f"127.0.0.1:{_free_port()}"
    procs, outs = [], []
    for node in range(2):
        out = tmp_path / f"node{node}"
        os.makedirs(out)
        outs.append(out)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={node}",
               "--nproc_per_node=1", "--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}",
               os.path.join(REPO, "tests", "ddp_worker.py"), str(out), "--ddp", *tiny_args]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO}
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                      cwd=str(out), start_new_session=True))
    try:
        for p in procs:
            _, err = p.communicate(timeout=240)
            assert p.returncode == 0, err[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    ranks = sorted((json.loads(f.read_text())[0] for out in outs for f in out.glob("rank*.json")),
                   key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["metrics"] == ranks[1]["metrics"]
    rows = (tmp_path / "results" / "results.csv").read_text().strip().splitlines()
    assert len(rows) == 2, "one header and one row: only global rank 0 writes"
    _, single_node = torchrun(tiny_args + ["--results_dir", str(tmp_path / "one")], tmp_path / "one_node")
    _same_metrics(ranks[0]["metrics"], single_node[0][0]["metrics"])
    assert [h["vali_loss"] for h in ranks[0]["history"]] == pytest.approx(
        [h["vali_loss"] for h in single_node[0][0]["history"]], rel=1e-6)


# ---- failures end every rank, promptly ------------------------------------------------------------
def test_a_stalled_peer_fails_the_job_within_the_timeout(tiny_args, tmp_path):
    start = time.time()
    proc, ranks = torchrun(tiny_args + ["--dist_timeout", "0.15"], tmp_path, env={"STALL_RANK": "1"}, timeout=180)
    assert proc.returncode != 0 and ranks == [] and time.time() - start < 90
    assert "error: a collective operation failed" in proc.stderr


def test_an_exception_on_one_rank_ends_every_rank(tiny_args, tmp_path):
    start = time.time()
    proc, ranks = torchrun(tiny_args, tmp_path, env={"RAISE_RANK": "1"}, timeout=180)
    assert proc.returncode != 0 and ranks == [] and time.time() - start < 90
    assert "injected failure on rank 1" in proc.stderr


def test_a_non_finite_loss_stops_every_rank_naming_epoch_and_step(tiny_args, tmp_path):
    proc, ranks = torchrun(tiny_args, tmp_path, env={"NAN_AT": "1:2:7"}, timeout=180)
    assert proc.returncode == 1 and ranks == []
    lines = [line for line in proc.stderr.splitlines() if "non-finite training loss" in line]
    assert len(lines) == 2 and all("epoch 2, step 7 of" in line for line in lines), lines


def test_a_non_finite_loss_in_one_process(tiny_args, monkeypatch):
    from exp.exp_forecast import ExpForecast
    original = ExpForecast._forward

    def poisoned(self, model, batch, rollout=False):
        pred, true = original(self, model, batch, rollout)
        return (pred * float("inf"), true) if model.training else (pred, true)

    monkeypatch.setattr(ExpForecast, "_forward", poisoned)
    with pytest.raises(TrainingError, match="epoch 1, step 1 of"):
        run.main(tiny_args)
