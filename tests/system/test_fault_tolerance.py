"""Resume, elastic restarts, checkpoint safety, multi-node, and failures that must never hang."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

import run
from tests.conftest import REPO, forked_ranks, run_cli, start_process, torchrun
from utils import checkpoint
from utils.errors import ConfigError, TrainingError

METRICS = ("mse", "mae", "rmse", "mape", "mspe")
WORKER = os.path.join(REPO, "tests", "ddp_worker.py")


def _start(cmd, cwd, env):
    return start_process(cmd, {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO, **env}, cwd)


def _paused_pid(marker, proc, seconds=120) -> int:
    """The pid a PAUSE_AT probe wrote once its rank reached the pause."""
    deadline = time.time() + seconds
    while time.time() < deadline and proc.poll() is None:
        if marker.exists() and marker.read_text():
            return int(marker.read_text())
        time.sleep(0.1)
    raise AssertionError(f"the run never reached its pause: {proc.stderr.read()[-2000:] if proc.stderr else ''}")


def _finish(proc, timeout=60) -> str:
    try:
        return proc.communicate(timeout=timeout)[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def _node(node: int, endpoint: str, entry: list, cwd, env=None):
    """One of two loopback "nodes": a torchrun of one process joining the c10d rendezvous at endpoint."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={node}", "--nproc_per_node=1",
           "--rdzv_backend=c10d", f"--rdzv_endpoint={endpoint}", *entry]
    return _start(cmd, cwd, env or {})


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _same_metrics(a, b, rel=1e-6):
    for k in METRICS:
        assert a[k] == pytest.approx(b[k], rel=rel), k


# ---- resume ---------------------------------------------------------------------------------------
def _folders(tmp_path, name: str) -> list:
    """A run's own --checkpoints and --results_dir: the same configuration trained twice for a comparison is two
    runs, and its results are never shared with one whose checkpoints are elsewhere."""
    return ["--checkpoints", str(tmp_path / name), "--results_dir", str(tmp_path / f"{name}_results")]


def test_resume_auto_continues_an_interrupted_run_exactly(tiny_args, tmp_path):
    """Stopped at the first step of epoch 3, the run continues from epoch 2's checkpoint. Dropout stays on:
    equality needs the random states restored too."""
    args = tiny_args + ["--lradj", "type1", "--resume", "auto", "--train_epochs", "4"]
    whole = run.main(args + _folders(tmp_path, "a"))[0]
    with pytest.raises(_Stop):
        run.main(args + _folders(tmp_path, "b"), callbacks=[_StopAt(3, 1)])
    (last,) = (tmp_path / "b").glob("*/last.pth")
    assert len(checkpoint.load(str(last), torch.device("cpu"))["history"]) == 2
    resumed = run.main(args + _folders(tmp_path, "b"))[0]
    assert [h["epoch"] for h in resumed["history"]] == [1, 2, 3, 4]
    assert [h["vali_loss"] for h in resumed["history"]] == [h["vali_loss"] for h in whole["history"]]
    _same_metrics(resumed["metrics"], whole["metrics"], rel=1e-9)
    # the time this call trained (a sweep's cell cost): the epochs it ran, not those its checkpoint brought
    ran = resumed["history"][2:]
    assert resumed["epoch_seconds"] == pytest.approx(sum(h["train_seconds"] + h["eval_seconds"] for h in ran))


class _Stop(Exception):
    pass


class _StopAt:
    """A callback that ends the run at one training micro-batch (epoch and step count from 1)."""

    def __init__(self, epoch, step):
        self.at = (epoch, step)

    def on_train_step(self, epoch, step, loss):
        if (epoch, step) == self.at:
            raise _Stop
        return loss


def test_a_run_by_steps_resumes_in_the_middle_of_an_epoch_and_of_a_row_exactly(tiny_args, tmp_path):
    """22 steps an epoch; validation every 10 steps on 20 windows; a checkpoint every 4 steps. Stopped at step 25
    (epoch 2), it resumes at step 24 with the loader position, every random stream and the row's losses so far:
    every history row and the test equal an uninterrupted run's bit for bit (dropout on)."""
    args = tiny_args + ["--train_steps", "30", "--val_every", "10", "--save_every", "4", "--lradj", "warmup_cosine",
                        "--val_windows", "20", "--resume", "auto"]
    whole = run.main(args + _folders(tmp_path, "a"))[0]
    with pytest.raises(_Stop):
        run.main(args + _folders(tmp_path, "b"), callbacks=[_StopAt(2, 3)])
    (last,) = (tmp_path / "b").glob("*/last.pth")
    state = checkpoint.load(str(last), torch.device("cpu"))
    assert state["step"] == 24 and len(state["history"]) == 2 and len(state["row_so_far"][0]) == 4
    resumed = run.main(args + _folders(tmp_path, "b"))[0]
    assert [h["step"] for h in whole["history"]] == [10, 20, 30]
    assert [h["epoch"] for h in whole["history"]] == [round(s / 22, 4) for s in (10, 20, 30)]
    drop = ("train_seconds", "eval_seconds")
    assert [{k: v for k, v in h.items() if k not in drop} for h in resumed["history"]] == \
           [{k: v for k, v in h.items() if k not in drop} for h in whole["history"]]
    _same_metrics(resumed["metrics"], whole["metrics"], rel=0)
    assert whole["metrics"]["steps_run"] == 30 and whole["metrics"]["vali_windows_end"] == 46
    assert whole["metrics"]["vali_loss_end"] > 0


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
    """SIGKILL one of two workers at step 16 of a run by steps (11 steps an epoch at 2 x 16); torchrun restarts the
    group, which resumes from step 15, in the middle of epoch 2 and of a row, and ends as an uninterrupted run."""
    args = tiny_args + ["--train_steps", "24", "--val_every", "8", "--save_every", "3", "--dropout", "0.1",
                        "--resume", "auto"]
    marker = tmp_path / "victim.pid"
    out = tmp_path / "elastic"
    os.makedirs(out)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "--max-restarts=3",
           WORKER, str(out), "--ddp", *args]
    proc = _start(cmd, out, {"PAUSE_AT": f"1:2:5:{marker}"})
    os.kill(_paused_pid(marker, proc), signal.SIGKILL)
    stderr = _finish(proc, timeout=240)
    assert proc.returncode == 0, stderr[-3000:]
    assert "resumed from" in stderr and "1 rows and 7 micro-batches done, step 15" in stderr
    ranks = [json.loads((out / f"rank{r}.json").read_text())[0] for r in range(2)]
    assert [r["restarts"] for r in ranks] == [1, 1], "one restart of the whole group"
    _, whole = forked_ranks(args + _folders(tmp_path, "w"), tmp_path / "whole")
    assert [h["step"] for h in ranks[0]["history"]] == [8, 16, 24]
    assert [h["train_loss"] for h in ranks[0]["history"]] == [h["train_loss"] for h in whole[0][0]["history"]]
    _same_metrics(ranks[0]["metrics"], whole[0][0]["metrics"], rel=0)
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
    from data_provider.factory import build_data
    from exp.config import parse_args, resolve
    trained = run.main(tiny_args + ["--train_epochs", "1"])[0]
    ckpt = trained["metrics"]["checkpoint"]
    weights = checkpoint.load(ckpt, torch.device("cpu"))["model"]
    prefixed = tmp_path / "prefixed.pth"
    torch.save({f"module.{k}": v for k, v in weights.items()}, prefixed)
    for source in (ckpt, str(prefixed)):
        args = resolve(parse_args(tiny_args + ["--adaptation", "--pretrain_model_path", source]))
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
    # a checkpoint of this framework is checked by the architecture it records, a resumed one also by task and data
    with pytest.raises(ConfigError, match=r"cannot fine-tune from .*: it was trained with other flags: d_model: 16 -> 32"):
        run.main(tiny_args + ["--adaptation", "--pretrain_model_path", ckpt, "--d_model", "32"])
    last = os.path.join(os.path.dirname(ckpt), "last.pth")
    with pytest.raises(ConfigError, match=r"cannot resume .*: it was trained with other flags: seq_len: 48 -> 32"):
        run.main(tiny_args + ["--resume", last, "--seq_len", "32"])


# ---- multi-node -----------------------------------------------------------------------------------
def test_two_nodes_on_loopback_train_like_one_process_of_both_batches(tiny_args, tmp_path):
    """Without dropout, 2 nodes x 1 process x 16 train like 1 process x 32 to float rounding."""
    tiny_args = tiny_args + ["--dropout", "0", "--lr_scale", "none"]
    endpoint = f"127.0.0.1:{_free_port()}"
    outs = [tmp_path / f"node{node}" for node in range(2)]
    procs = []
    for node, out in enumerate(outs):
        os.makedirs(out)
        procs.append(_node(node, endpoint, [WORKER, str(out), "--ddp", *tiny_args], out))
    for p in procs:
        err = _finish(p, timeout=240)
        assert p.returncode == 0, err[-3000:]
    ranks = sorted((json.loads(f.read_text())[0] for out in outs for f in out.glob("rank*.json")),
                   key=lambda r: r["rank"])
    assert [r["rank"] for r in ranks] == [0, 1] and ranks[0]["metrics"] == ranks[1]["metrics"]
    rows = (tmp_path / "results" / "results.csv").read_text().strip().splitlines()
    assert len(rows) == 2, "one header and one row: only global rank 0 writes"
    one = run.main(tiny_args + ["--batch_size", "32"])[0]
    _same_metrics(ranks[0]["metrics"], one["metrics"])
    assert [h["vali_loss"] for h in ranks[0]["history"]] == pytest.approx(
        [h["vali_loss"] for h in one["history"]], rel=1e-6)


# ---- failures end every rank, promptly ------------------------------------------------------------
def test_a_stalled_peer_fails_the_job_within_the_timeout(tiny_args, tmp_path):
    start = time.time()
    proc, ranks = torchrun(tiny_args + ["--dist_timeout", "0.08"], tmp_path, env={"STALL_RANK": "1"}, timeout=180)
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


def test_a_non_finite_loss_in_one_process(tiny_args):
    class Infinite:  # an Exp callback may replace a step's loss
        def on_train_step(self, epoch, step, loss):
            return loss * float("inf")

    with pytest.raises(TrainingError, match="epoch 1, step 1 of"):
        run.main(tiny_args, callbacks=[Infinite()])


# ---- interruptions, a full disk, and bad input on one node only ------------------------------------
def test_ctrl_c_is_one_line_with_exit_code_130_and_the_run_resumes(tiny_args, tmp_path):
    marker = tmp_path / "paused.pid"
    proc = _start([sys.executable, WORKER, str(tmp_path), *tiny_args], tmp_path, {"PAUSE_AT": f"0:2:3:{marker}"})
    os.kill(_paused_pid(marker, proc), signal.SIGINT)
    stderr = _finish(proc)
    assert proc.returncode == 130, stderr[-2000:]
    assert stderr.strip().splitlines()[-1] == "interrupted during epoch 2; continue with --resume auto"
    assert "Traceback" not in stderr
    resumed = run.main(tiny_args + ["--resume", "auto"])[0]
    assert [h["epoch"] for h in resumed["history"]] == [1, 2]


def test_sigterm_to_torchrun_ends_every_rank_with_its_line(tiny_args, tmp_path):
    """Rank 1 pauses inside a step, so rank 0 waits in the gradient all-reduce, where no Python handler runs:
    its watchdog prints the line and exits."""
    marker = tmp_path / "paused.pid"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", WORKER,
           str(tmp_path), "--ddp", *tiny_args]
    proc = _start(cmd, tmp_path, {"PAUSE_AT": f"1:2:3:{marker}"})
    _paused_pid(marker, proc)
    start = time.time()
    proc.send_signal(signal.SIGTERM)  # torchrun passes it on to its workers
    stderr = _finish(proc)
    assert proc.returncode != 0 and time.time() - start < 30
    lines = [line for line in stderr.splitlines() if "interrupted during epoch 2; continue with --resume auto" in line]
    assert sorted(lines) == ["[rank 1] interrupted during epoch 2; continue with --resume auto",
                             "interrupted during epoch 2; continue with --resume auto"], stderr[-3000:]
    ours = re.compile(rf'File "{re.escape(REPO)}/(?!\.venv)')  # CI's virtual environment lives in the clone
    assert not ours.search(stderr), "no traceback from our code (torchrun prints its own)"


def test_a_rank_whose_peer_was_interrupted_says_so(tiny_args, tmp_path):
    """Ctrl-C reaches rank 1 alone, paused inside a step: it stops with its line, and rank 0, whose gradient
    all-reduce fails, names the interruption instead of a failed collective (torchrun's stop of the group,
    arriving meanwhile, does not cut that report short)."""
    marker = tmp_path / "paused.pid"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", WORKER,
           str(tmp_path), "--ddp", *tiny_args]
    proc = _start(cmd, tmp_path, {"PAUSE_AT": f"1:2:3:{marker}"})
    os.kill(_paused_pid(marker, proc), signal.SIGINT)
    stderr = _finish(proc)
    assert "[rank 1] interrupted during epoch 2; continue with --resume auto" in stderr, stderr[-3000:]
    assert "\nerror: a peer rank stopped: rank 1 was interrupted (SIGINT)\n" in stderr, stderr[-3000:]
    ours = re.compile(rf'File "{re.escape(REPO)}/(?!\.venv)')
    assert not ours.search(stderr), "no traceback from our code"


def test_through_scripts_torchrun_a_stop_and_bad_input_end_in_one_line_each_and_the_usual_exit_code(tiny_args,
                                                                                                     tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) and a flag out of range, launched as
    scripts/launch.sh launches: no traceback from torchrun, exit codes 130 and 2 as from one process."""
    marker = tmp_path / "paused.pid"
    launcher = [sys.executable, "-m", "scripts.torchrun", "--standalone", "--nproc_per_node=2"]
    proc = _start([*launcher, WORKER, str(tmp_path), "--ddp", *tiny_args], REPO, {"PAUSE_AT": f"1:2:3:{marker}"})
    _paused_pid(marker, proc)
    os.killpg(proc.pid, signal.SIGINT)
    stderr = _finish(proc)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == "torchrun: stopped by SIGINT; the workers stopped with it"
    assert "[rank 1] interrupted during epoch 2; continue with --resume auto" in stderr
    bad = _start([*launcher, os.path.join(REPO, "run.py"), "--ddp", *tiny_args, "--batch_size", "0"], REPO, {})
    stderr = _finish(bad)
    assert bad.returncode == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert "error: --batch_size must be >= 1, got 0" in stderr.splitlines()
    assert re.search(r"torchrun: 2 worker\(s\) failed, rank \d first \(exit code 2\); their errors are above\n$", stderr)
FULL_DISK = """
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))  # Python ignores SIGXFSZ: writes fail with EFBIG
sys.argv, sys.path[0] = ["run.py", *sys.argv[1:]], {repo!r}
runpy.run_path(sys.path[0] + "/run.py", run_name="__main__")
"""


def _on_a_full_disk(flags, cwd, limit):
    script = FULL_DISK.format(limit=limit, repo=REPO)
    return subprocess.run([sys.executable, "-c", script, *flags], capture_output=True, text=True, cwd=str(cwd),
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=120)


def test_a_full_disk_is_one_line_leaving_the_previous_files_and_no_temporary_one(tiny_args, tmp_path):
    """Files may grow to 1 KB past the largest of metrics.json and window_errors.npz only: they fit, a forecast
    plot and a checkpoint do not."""
    flags = tiny_args + ["--model", "dlinear", "--nonautoregressive", "--visualize"]
    first = run.main(flags)[0]["metrics"]
    test = tmp_path / "results" / first["setting"] / "tp16"
    plot = test / "forecast_0.png"
    before = plot.read_bytes()
    limit = max((test / name).stat().st_size for name in ("metrics.json", "window_errors.npz")) + 1024
    assert len(before) > limit
    retest = _on_a_full_disk(flags + ["--resume", "auto"], tmp_path, limit)
    assert retest.returncode == 1 and "Traceback" not in retest.stderr
    assert retest.stderr.strip().splitlines()[-1] == f"error: cannot write {plot}: File too large"
    assert plot.read_bytes() == before
    train = _on_a_full_disk(flags + ["--des", "full"], tmp_path, limit)
    assert train.returncode == 1 and "Traceback" not in train.stderr
    assert train.stderr.strip().splitlines()[-1].endswith("checkpoint.pth: File too large")
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name]


def _listening(port: int, timeout=60) -> None:
    import socket
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port}")


def test_bad_input_on_one_node_stops_the_other_within_seconds(tiny_csv, tiny_args, tmp_path):
    """A relative --root_path that exists on node 0 only; --dist_timeout stays at its 30 minutes.

    Node 1 starts first, so its torchrun hosts the rendezvous store: its rank fails at once and must wait
    for node 0 to read the error before leaving (its torchrun, and the store, leave with it)."""
    port = _free_port()
    relative = [a for a in tiny_args if a != str(tiny_csv.parent)]
    relative[relative.index("--root_path") + 1:relative.index("--root_path") + 1] = ["data"]
    procs = {}
    for node in (1, 0):
        cwd = tmp_path / f"node{node}"
        os.makedirs(cwd / "data")
        if node == 0:
            os.symlink(tiny_csv, cwd / "data" / tiny_csv.name)
        procs[node] = _node(node, f"127.0.0.1:{port}", [os.path.join(REPO, "run.py"), "--ddp", *relative], cwd)
        if node == 1:
            _listening(port)
    start = time.time()
    node0, node1 = (_finish(procs[node], timeout=120) for node in (0, 1))
    assert time.time() - start < 60 and all(p.returncode != 0 for p in procs.values())
    assert "error: data file not found: data/tiny.csv" in node1
    # global ranks follow the order the nodes joined in, not --node_rank
    assert re.search(r"error: a peer rank stopped: rank \d: data file not found: data/tiny.csv", node0), node0[-2000:]


def _edited_in_the_middle(path) -> None:
    """One digit of the middle row changed: the same length, the same first and last 64 KiB."""
    lines = path.read_text().splitlines(keepends=True)
    middle = len(lines) // 2
    lines[middle] = lines[middle][:-2] + ("1" if lines[middle][-2] != "1" else "2") + "\n"
    path.write_text("".join(lines))


@pytest.mark.parametrize("differs", ["data file content", "checkpoint folder"])
def test_nodes_that_do_not_share_data_or_folders_stop_at_start_up(tiny_args, tmp_path, differs):
    """Two loopback nodes, each in its own working directory. Either each has its own copy of a 280 KB data file,
    node 1's edited in the middle (same length), or both read one file but save into ./ck and ./res of their own
    folder: both stop before training with one line saying what differs (the rank that learns it from the other
    says so)."""
    from data_provider import synthetic
    port, flags = _free_port(), list(tiny_args)
    if differs == "checkpoint folder":
        flags[flags.index("--checkpoints") + 1], flags[flags.index("--results_dir") + 1] = "ck", "res"
    else:
        flags[flags.index("--root_path") + 1], flags[flags.index("--data_path") + 1] = "data", "big.csv"
    procs = {}
    for node in (1, 0):
        cwd = tmp_path / f"node{node}"
        os.makedirs(cwd / "data")
        big = cwd / "data" / "big.csv"
        synthetic.write_csv(synthetic.generate(length=5000, n_covariates=2, seed=1), str(big))
        if node == 1 and differs == "data file content":
            _edited_in_the_middle(big)
        procs[node] = _node(node, f"127.0.0.1:{port}", [os.path.join(REPO, "run.py"), "--ddp", *flags], cwd)
        if node == 1:
            _listening(port)
    start = time.time()
    outputs = [_finish(procs[node], timeout=120) for node in (0, 1)]
    assert time.time() - start < 60 and all(p.returncode != 0 for p in procs.values()), outputs
    assert not any("epoch 1" in out for out in outputs), "nothing trains"
    errors = [line for out in outputs for line in out.splitlines() if re.match(r"(\[rank \d\] )?error: ", line)]
    assert len(errors) == 2, outputs
    if differs == "checkpoint folder":
        assert all(re.search(r"error: (a peer rank stopped: rank \d: )?rank 1 on host \S+ cannot see what rank 0 on host \S+ wrote into --checkpoints "
                             r"ck \(.*node\d/ck\), --results_dir res \(.*node\d/res\): every node must see the same",
                             line) for line in errors), errors
    else:
        assert all(re.search(r"error: (a peer rank stopped: rank \d: )?ranks \[1\] decided differently from rank 0 at start-up: data file "
                             r"'big.csv \d+-\w+' on rank 1, 'big.csv \d+-\w+' on rank 0", line)
                   for line in errors), "\n".join(errors)
