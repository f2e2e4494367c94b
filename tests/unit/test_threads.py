"""The intra-op thread count a run chooses: the flag, then OMP_NUM_THREADS, then the cores this process may use,
shared among the node's ranks and left free by other processes; the cgroup quota; the load probe."""
import pytest

from utils import threads


@pytest.mark.parametrize("requested, environment, ranks, cores, busy, expected", [
    (3, "1", 1, 2, 1.0, (3, "--threads")),
    (None, "1", 1, 8, 0.0, (1, "OMP_NUM_THREADS")),
    (None, None, 1, 2, 0.0, (2, "2 cores available, 1 rank(s) on this node, 0.0 kept busy by other processes")),
    (None, None, 1, 2, 0.2, (2, "2 cores available, 1 rank(s) on this node, 0.2 kept busy by other processes")),
    (None, None, 1, 2, 0.3, (1, "2 cores available, 1 rank(s) on this node, 0.3 kept busy by other processes")),
    (None, None, 1, 2, 1.9, (1, "2 cores available, 1 rank(s) on this node, 1.9 kept busy by other processes")),
    (None, None, 1, 16, 3.0, (13, "16 cores available, 1 rank(s) on this node, 3.0 kept busy by other processes")),
    (None, None, 4, 16, 3.0, (4, "16 cores available, 4 rank(s) on this node")),  # siblings are no neighbours
    (None, None, 4, 2, None, (1, "2 cores available, 4 rank(s) on this node")),
    (None, None, 1, 4, None, (4, "4 cores available, 1 rank(s) on this node")),  # no /proc/stat
])
def test_the_choice_of_threads(requested, environment, ranks, cores, busy, expected):
    assert threads.choose(requested, environment, ranks, cores, busy) == expected


def _cgroup(tmp_path, proc_lines, files):
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    (tmp_path / "self_cgroup").write_text(proc_lines)
    return threads.cgroup_cpus(str(tmp_path / "cg"), str(tmp_path / "self_cgroup"))


def test_the_cgroup_quota_of_this_group_or_a_parent_bounds_the_cores(tmp_path):
    assert _cgroup(tmp_path / "a", "0::/job/step\n", {"cg/job/step/cpu.max": "150000 100000\n"}) == 1.5
    assert _cgroup(tmp_path / "b", "0::/job/step\n", {"cg/job/step/cpu.max": "max 100000\n",
                                                    "cg/job/cpu.max": "400000 100000\n"}) == 4.0
    assert _cgroup(tmp_path / "c", "0::/\n", {"cg/cpu.max": "max 100000\n"}) is None
    assert _cgroup(tmp_path / "d", "4:cpu,cpuacct:/docker/x\n",
                   {"cg/cpu,cpuacct/docker/x/cpu.cfs_quota_us": "250000", "cg/cpu,cpuacct/docker/x/cpu.cfs_period_us":
                    "100000"}) == 2.5
    assert _cgroup(tmp_path / "e", "1:cpu:/\n", {"cg/cpu/cpu.cfs_quota_us": "-1"}) is None
