"""One launch per run: the main rank holds a lock on each run it plans, from before it reads the run's folders
until it ends, so a second launch of the same run stops at start-up with one line naming the holder instead of
training into the same folders.

The lock of run <setting> is <root>/.locks/<setting>.lock under --checkpoints and --results_dir (outside the run
folders, which --overwrite deletes). It is an flock(2), which the kernel releases with the process however it
ends, and the file records its holder (host, pid, command, a heartbeat refreshed every HEARTBEAT_SECONDS). A
record left behind by a process that died (kill -9, a lost node) is stale and taken over with a warning naming
it: on this host when its process no longer runs, on another host when its heartbeat is older than
STALE_SECONDS. The record also covers file systems whose locks do not reach other hosts (NFS mounted with
nolock) or that have none: a record of a live holder refuses the launch there too.
"""
import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import sys
import threading
import time

from utils.errors import ConfigError

log = logging.getLogger(__name__)
HEARTBEAT_SECONDS = 30.0
STALE_SECONDS = 120.0
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)  # a file system without flock


def _process_start(pid: int) -> str | None:
    """When a process started (clock ticks since boot): a reused pid has another start."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def _me() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": _process_start(os.getpid()),
            "boot_id": _boot_id(), "since": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv)}


def describe(owner: dict) -> str:
    return f"pid {owner.get('pid')} on host {owner.get('host')} since {owner.get('since')} ({owner.get('command')})"


def is_alive(owner: dict, now: float | None = None) -> bool:
    """Whether a lock record's holder may still run: on this host (same boot), whether its process does; on
    another, whether its heartbeat is recent."""
    if owner.get("host") == socket.gethostname() and owner.get("boot_id") == _boot_id():
        return owner.get("pid_start") is not None and _process_start(owner["pid"]) == owner["pid_start"]
    return (now or time.time()) - owner.get("heartbeat", 0) < STALE_SECONDS


def _read_record(fd: int) -> dict | None:
    try:
        record = json.loads(os.pread(fd, 1 << 16, 0) or b"null")
    except ValueError:  # being rewritten, or not ours: no holder to name
        return None
    return record if isinstance(record, dict) else None


class RunLocks:
    """The main rank's locks: acquire(setting) for each run it plans, release() when it ends."""

    def __init__(self, *roots: str):
        self.roots = roots
        self.held = {}  # lock path -> open file descriptor
        self.owner = _me()
        self._stop = threading.Event()
        self._writing = threading.Lock()  # the heartbeat never writes to a descriptor release() has closed
        self._beat = None

    def acquire(self, setting: str) -> None:
        for root in self.roots:
            path = os.path.realpath(os.path.join(root, ".locks", f"{setting}.lock"))
            if path not in self.held:  # --checkpoints and --results_dir may be one folder
                fd = self._lock(path, setting)
                with self._writing:
                    self.held[path] = fd
        if self._beat is None:
            self._beat = threading.Thread(target=self._heartbeat, name="run-lock-heartbeat", daemon=True)
            self._beat.start()

    def _lock(self, path: str, setting: str) -> int:
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise ConfigError(f"cannot write the lock of run {setting} ({path}: {e.strerror or e})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_record(fd)
            os.close(fd)
            raise ConfigError(f"run {setting} is in use by another launch: "
                              f"{describe(holder) if holder else 'its lock ' + path + ' is held'}; wait for it to "
                              "end or stop it") from None
        except OSError as e:
            if e.errno not in _NO_LOCKS:
                os.close(fd)
                raise ConfigError(f"cannot lock run {setting} ({path}: {e.strerror or e})") from None
            log.info("%s: this file system has no locks; concurrent launches are detected by the record alone", path)
        previous = _read_record(fd)
        if previous and (previous.get("host"), previous.get("pid")) != (self.owner["host"], self.owner["pid"]):
            if is_alive(previous):  # a holder the kernel lock did not see: another host, or no locks here
                os.close(fd)
                raise ConfigError(f"run {setting} is in use by another launch: {describe(previous)}; wait for it to "
                                  f"end or stop it (a record older than {STALE_SECONDS:.0f} s from another host is "
                                  "stale and taken over)")
            log.warning("run %s: its previous launch, %s, ended without releasing its lock; taking it over",
                        setting, describe(previous))
        self._write(fd)
        return fd

    def _write(self, fd: int) -> None:
        data = json.dumps({**self.owner, "heartbeat": time.time()}).encode()
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            with self._writing:
                for fd in self.held.values():
                    with contextlib.suppress(OSError):
                        self._write(fd)

    def release(self) -> None:
        """Empty each record (a clean end leaves no stale holder) and unlock. The file stays: deleting it would let
        a launch that opened it just before lock a file no longer in the folder while a third creates another."""
        self._stop.set()
        with self._writing:
            for fd in self.held.values():
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                os.close(fd)  # releases the flock
            self.held.clear()


class NoLocks:
    """Ranks other than the main one: the main rank's locks cover the run."""

    def acquire(self, setting: str) -> None:
        pass

    def release(self) -> None:
        pass


def run_locks(is_main: bool, checkpoints: str, results_dir: str):
    return RunLocks(checkpoints, results_dir) if is_main else NoLocks()
