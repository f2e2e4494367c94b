"""Run identity helpers: a short hash of a canonical configuration, content fingerprints of files,
the differences between two configurations, and the provenance a result records."""
import contextlib
import hashlib
import json
import os
import platform
import subprocess
import sys
import time

import torch

from utils.errors import OutputError
from utils.files import write_atomic
from utils.process import denormals_flushed

HASH_CHUNK = 1 << 20  # bytes hashed per read


def _fingerprint(size: int, digest: str) -> str:
    return f"{size}-{digest[:16]}"


def content_fingerprint(data: bytes) -> str:
    """The size and a SHA-256 of every byte: the fingerprint the same bytes get as a file."""
    return _fingerprint(len(data), hashlib.sha256(data).hexdigest())


def file_fingerprint(path: str) -> str:
    """content_fingerprint of a file's bytes, read whole (any edit anywhere changes it) once: the result is
    cached under the file's path, device, inode, size, modification and change times. The change time (ctime)
    cannot be set back by a program, so an edit that keeps the size and restores the modification time is
    hashed again too."""
    before = os.stat(path)
    key = _stat_key(path, before)
    cached = _FINGERPRINTS.get(key)
    if cached:
        return cached
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    fingerprint = _fingerprint(before.st_size, digest.hexdigest())
    if _stat_key(path, os.stat(path)) == key:  # not written to while it was read
        _FINGERPRINTS.put(key, fingerprint)
    return fingerprint


def _stat_key(path: str, st: os.stat_result) -> str:
    return f"{os.path.realpath(path)}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"


class _FingerprintCache:
    """Fingerprints of files by stat key, one small file each under $TSF_CACHE_DIR (default
    $XDG_CACHE_HOME/tsforecast or ~/.cache/tsforecast)/fingerprints, so a file is hashed once across processes.
    A cache that cannot be written only costs time: every lookup then hashes the file."""

    def get(self, key: str) -> str | None:
        try:
            with open(self._entry(key)) as f:
                return f.read().strip() or None
        except OSError:
            return None

    def put(self, key: str, fingerprint: str) -> None:
        with contextlib.suppress(OutputError):
            write_atomic(self._entry(key), lambda f: f.write(fingerprint.encode()))

    @staticmethod
    def _entry(key: str) -> str:
        root = os.environ.get("TSF_CACHE_DIR") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "tsforecast")
        return os.path.join(root, "fingerprints", hashlib.sha256(key.encode()).hexdigest()[:32])


_FINGERPRINTS = _FingerprintCache()


def config_hash(config: dict, length: int = 10) -> str:
    """Hash of a JSON-serialisable configuration, independent of key order."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def differences(recorded: dict, current: dict, sections=None) -> list:
    """'name: recorded -> current' for every value of the given sections of two configurations that differs."""
    found = []
    for section in sections or sorted(set(recorded) | set(current)):
        a, b = recorded.get(section, {}), current.get(section, {})
        for name in sorted(set(a) | set(b)):
            if a.get(name, "(absent)") != b.get(name, "(absent)"):
                found.append(f"{name}: {a.get(name, '(absent)')} -> {b.get(name, '(absent)')}")
    return found


def _git(*args: str) -> str | None:
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        out = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


_CPU_THREADS = " threads"  # how a CPU's device name ends: what machine_kind reads back


def _device_name() -> str:
    """The accelerator, or the CPU model and the threads torch uses: what a run's wall time was measured on."""
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()} x{torch.cuda.device_count()}"
    model = next((line.split(":", 1)[1].strip() for line in _read_lines("/proc/cpuinfo")
                  if line.startswith("model name")), platform.processor() or "CPU")
    return f"{model}, {torch.get_num_threads()}{_CPU_THREADS}"


def machine_kind(device: str) -> str:
    """The kind of machine a recorded device name (_device_name) is: "CPU" for processor threads, else the GPU."""
    return "CPU" if _CPU_THREADS in device else device


def _read_lines(path: str) -> list:
    try:
        with open(path) as f:
            return f.readlines()
    except OSError:
        return []


def provenance() -> dict:
    """Where and with what code a result was made (not part of its identity: recorded beside it)."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": _git("rev-parse", "HEAD"), "git_dirty": None if status is None else bool(status),
            "torch": torch.__version__, "python": platform.python_version(), "host": platform.node(),
            "device": _device_name(), "denormals_flushed": denormals_flushed(),
            "command": " ".join(sys.argv), "time": time.strftime("%Y-%m-%d %H:%M:%S")}
