"""One launch per run: a second launch of a run in progress stops at start-up naming the holder; a lock left by a
process that died is taken over with a warning naming it; a finished run leaves no holder behind."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import run
from tests.conftest import REPO, run_process, start_process
from utils import runlock
from utils.errors import ConfigError

DLINEAR = ["--model", "dlinear", "--nonautoregressive", "--train_epochs", "1"]


def _finished_run(tiny_args) -> tuple:
    """(flags, setting) of a trained run; the flags test it again."""
    metrics = run.main(tiny_args + DLINEAR)[0]["metrics"]
    return tiny_args + DLINEAR + ["--resume", "auto"], metrics["setting"]


def _lock_file(tmp_path, setting, root="ckpt"):
    return tmp_path / root / ".locks" / f"{setting}.lock"


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_run_in_use_is_refused_naming_its_holder(tiny_args, tmp_path):
    flags, setting = _finished_run(tiny_args)
    holder = runlock.RunLocks(str(tmp_path / "ckpt"), str(tmp_path / "results"))
    holder.acquire(setting)
    try:
        with pytest.raises(ConfigError, match=rf"run {setting} is in use by another launch: pid {os.getpid()} on "
                                              rf"host {socket.gethostname()} since .*; wait for it to end or stop it"):
            run.main(flags)
    finally:
        holder.release()
    run.main(flags)
    assert _lock_file(tmp_path, setting).read_text() == "", "a run that ended leaves no holder"


def _record(path, **owner):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"since": "2026-01-01 00:00:00", "command": "run.py ...", "pid_start": "1",
                                "boot_id": runlock._boot_id(), "heartbeat": time.time(), **owner}))


@pytest.mark.parametrize("where", ["this host, its process gone", "another host, no heartbeat for minutes"])
def test_a_lock_left_by_a_dead_launch_is_taken_over_with_a_warning(tiny_args, tmp_path, capsys, where):
    flags, setting = _finished_run(tiny_args)
    here = where.startswith("this")
    owner = {"host": socket.gethostname() if here else "node7", "pid": _dead_pid() if here else 4242,
             "heartbeat": time.time() - (0 if here else runlock.STALE_SECONDS + 60)}
    _record(_lock_file(tmp_path, setting, "results"), **owner)
    run.main(flags)
    assert f"its previous launch, pid {owner['pid']} on host {owner['host']} since 2026-01-01 00:00:00 (run.py ...), " \
           "ended without releasing its lock; taking it over" in capsys.readouterr().err


def test_a_live_holder_on_another_host_is_refused_where_the_lock_does_not_reach(tiny_args, tmp_path):
    """The kernel lock of another host is invisible on a file system without shared locks: its fresh record is
    what refuses the launch."""
    flags, setting = _finished_run(tiny_args)
    _record(_lock_file(tmp_path, setting), host="node7", pid=4242, heartbeat=time.time() - 5)
    with pytest.raises(ConfigError, match=rf"run {setting} is in use by another launch: pid 4242 on host node7"):
        run.main(flags)


@pytest.mark.slow
def test_two_launches_of_one_run_and_a_killed_holder(tiny_args, tmp_path):
    """A launch paused in its first epoch holds the run: the same command started beside it exits with one line
    naming it. Killed with SIGKILL, it leaves its record; the next launch takes the run over and finishes it."""
    flags = tiny_args + DLINEAR + ["--resume", "auto"]
    marker = tmp_path / "first.pid"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO, "PAUSE_AT": f"0:1:2:{marker}"}
    first = start_process([sys.executable, os.path.join(REPO, "tests", "ddp_worker.py"), str(tmp_path), *flags],
                          env, tmp_path)
    try:
        deadline = time.time() + 120
        while not (marker.exists() and marker.read_text()) and first.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        pid = int(marker.read_text())
        second = run_process([sys.executable, os.path.join(REPO, "run.py"), *flags], 120,
                             {**os.environ, "OMP_NUM_THREADS": "1"}, tmp_path)
        assert second.returncode == 2 and "Traceback" not in second.stderr
        (line,) = [line for line in second.stderr.splitlines() if line.startswith("error: ")]
        assert f"is in use by another launch: pid {pid} on host {socket.gethostname()}" in line, line
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate()
    third = run_process([sys.executable, os.path.join(REPO, "run.py"), *flags], 120,
                        {**os.environ, "OMP_NUM_THREADS": "1"}, tmp_path)
    assert third.returncode == 0, third.stderr[-2000:]
    assert f"its previous launch, pid {pid} on host {socket.gethostname()}" in third.stderr
