"""One launch per run: a second launch of a run in progress stops at start-up naming the holder; a lock left by a
process that died is taken over with a warning naming it; a finished run leaves no holder behind."""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

import run
from tests.conftest import REPO, run_process, start_process
from tests.integration.test_runlock import DLINEAR, _finished_run, _lock_file, _record
from utils import runlock


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


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
