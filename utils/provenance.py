"""Where and with what code a result was made, recorded beside it (never part of its identity)."""
import os
import platform
import subprocess
import sys
import time

import torch

from utils.process import denormals_flushed


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
