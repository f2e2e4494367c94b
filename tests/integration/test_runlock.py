"""One launch per run: a second launch of a run in progress stops at start-up naming the holder; a lock left by a
process that died is taken over with a warning naming it; a finished run leaves no holder behind."""
import json
import os
import socket
import time

import pytest

import run
from utils import runlock
from utils.errors import ConfigError

DLINEAR = ["--model", "dlinear", "--nonautoregressive", "--train_epochs", "1"]


def _finished_run(tiny_args) -> tuple:
    """(flags, setting) of a trained run; the flags test it again."""
    metrics = run.main(tiny_args + DLINEAR)[0]["metrics"]
    return tiny_args + DLINEAR + ["--resume", "auto"], metrics["setting"]


def _lock_file(tmp_path, setting, root="ckpt"):
    return tmp_path / root / ".locks" / f"{setting}.lock"


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


def test_a_live_holder_on_another_host_is_refused_where_the_lock_does_not_reach(tiny_args, tmp_path):
    """The kernel lock of another host is invisible on a file system without shared locks: its fresh record is
    what refuses the launch."""
    flags, setting = _finished_run(tiny_args)
    _record(_lock_file(tmp_path, setting), host="node7", pid=4242, heartbeat=time.time() - 5)
    with pytest.raises(ConfigError, match=rf"run {setting} is in use by another launch: pid 4242 on host node7"):
        run.main(flags)
