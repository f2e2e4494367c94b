"""A run's intra-op CPU threads, chosen once at start-up and logged.

torch's default is a thread per core of the machine, whatever else runs on it. Each op then waits at a barrier
for its slowest thread, and a thread whose core a neighbour's job holds makes every op wait for the scheduler:
on this project's 2-core machine, with one other process spinning, two threads made an epoch 1.8-3.4x longer
than one; with the cores free, two threads were 1.2-1.4x faster (docs/performance.md, scripts/benchmark/threads.py).
The choice, first that applies:
  --threads N        the user's
  OMP_NUM_THREADS    the launcher's or the user's (torchrun sets 1 per rank, a sweep its workers' share)
  the rule           the cores this process may use (its CPU affinity, capped by its cgroup's CPU quota) shared
                     among the node's ranks, and of those only the ones other processes left free while this
                     one started (a LoadProbe from the start of run.main to the model built: a core counts as
                     busy when others used more than a quarter of it)
The rule's choice is not part of a run's identity (thread counts change only float rounding), but a resumed run
takes the count its checkpoint was trained with, so that it continues bit for bit.
"""
import logging
import math
import os
import time

import torch

log = logging.getLogger(__name__)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def cgroup_cpus(root: str = "/sys/fs/cgroup", proc_cgroup: str = "/proc/self/cgroup") -> float | None:
    """The CPUs this process's cgroup (or a parent's) may use per period (None: no quota): cgroup v2's cpu.max
    ("150000 100000": 1.5 CPUs; "max ...": none), or v1's cpu.cfs_quota_us / cpu.cfs_period_us (-1: none)."""
    limits = []
    for line in (_read(proc_cgroup) or "").splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: the unified hierarchy
            folders, read = [os.path.join(root, path.lstrip("/")), os.path.join(root, "unified", path.lstrip("/"))], \
                lambda d: (_read(os.path.join(d, "cpu.max")) or "max").split()
        elif "cpu" in controllers.split(","):
            folders = [os.path.join(root, c, path.lstrip("/")) for c in (controllers, "cpu", "cpu,cpuacct")]
            read = lambda d: [_read(os.path.join(d, "cpu.cfs_quota_us")) or "-1",  # noqa: E731
                              _read(os.path.join(d, "cpu.cfs_period_us")) or "100000"]
        else:
            continue
        for folder in folders:
            while folder.startswith(root):  # the quota of a parent bounds its children too
                quota, period = (read(folder) + ["100000"])[:2]
                if quota not in ("max", "-1") and float(period) > 0:
                    limits.append(float(quota) / float(period))
                folder = os.path.dirname(folder)
    return min(limits) if limits else None


def available_cores() -> int:
    """Cores this process may use: its CPU affinity, capped by its cgroup's quota (whole CPUs, at least one)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = cgroup_cpus()
    return max(1, min(cores, math.floor(quota + 1e-9))) if quota else cores


def describe_cores() -> str:
    quota = cgroup_cpus()
    return f"{available_cores()} cores available ({len(os.sched_getaffinity(0))} in affinity" + \
        (f", cgroup quota {quota:g} CPUs)" if quota else ", no cgroup quota)")


def _cpu_jiffies(cpus: set) -> tuple | None:
    """(busy, total) jiffies since boot of the given CPUs, from /proc/stat (None where there is none)."""
    lines = (_read("/proc/stat") or "").splitlines()
    busy = total = 0
    for line in lines:
        name, *fields = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
            continue
        user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in fields[:8])
        busy += user + nice + system + irq + softirq + steal  # steal: a hypervisor's other guests
        total += user + nice + system + idle + iowait + irq + softirq + steal
    return (busy, total) if total else None


class LoadProbe:
    """The cores other processes keep busy, measured from construction to others_busy(): the CPU time of the
    CPUs this process may use, less its own."""

    def __init__(self):
        self.cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        self.start, self.own = _cpu_jiffies(self.cpus), time.process_time()

    def others_busy(self) -> float | None:
        """Cores' worth of other processes' work (None: no /proc/stat, or too short a window to tell)."""
        end = _cpu_jiffies(self.cpus)
        if self.start is None or end is None:
            return None
        busy, total = end[0] - self.start[0], end[1] - self.start[1]
        wall = total / len(self.cpus)  # jiffies that passed, per CPU
        if wall < 5:  # under 50 ms at the usual 100 Hz: noise
            return None
        own = (time.process_time() - self.own) * os.sysconf("SC_CLK_TCK")
        return max(busy - own, 0.0) / wall


BUSY_SHARE = 0.25  # a core whose time others used more than this much of is not free for a thread of ours
_chosen = {"automatic": False}


def choose(requested: int | None, environment: str | None, local_ranks: int, cores: int,
           others_busy: float | None) -> tuple:
    """(threads, why) by the rules above."""
    if requested:
        return requested, "--threads"
    if environment:
        return int(environment), "OMP_NUM_THREADS"
    share = max(1, cores // max(local_ranks, 1))
    why = f"{cores} cores available, {local_ranks} rank(s) on this node"
    if local_ranks > 1 or others_busy is None:  # ranks of one node would see each other as the neighbours
        return share, why
    free = max(1, math.floor(cores - others_busy + BUSY_SHARE))
    return min(share, free), f"{why}, {others_busy:.1f} kept busy by other processes"


def configure(requested: int | None, probe: LoadProbe) -> tuple:
    """Set this process's intra-op threads; returns (threads, why)."""
    environment = os.environ.get("OMP_NUM_THREADS")
    threads, why = choose(requested, environment, int(os.environ.get("LOCAL_WORLD_SIZE", 1)), available_cores(),
                          None if requested or environment else probe.others_busy())
    _chosen["automatic"] = not (requested or environment)
    torch.set_num_threads(threads)
    return threads, why


def resume_with(threads: int) -> None:
    """A resumed run continues with the threads it was trained with (float rounding depends on them), unless
    they were set by --threads or OMP_NUM_THREADS."""
    if _chosen["automatic"] and threads != torch.get_num_threads():
        log.info("intra-op threads: %d, as the run was trained with (the rule gave %d)", threads,
                 torch.get_num_threads())
        torch.set_num_threads(threads)
