"""The intra-op thread count a run chooses: the flag, then OMP_NUM_THREADS, then the cores this process may use,
shared among the node's ranks and left free by other processes; the cgroup quota; the load probe."""
import subprocess
import sys
import time

import pytest

from utils import threads


@pytest.mark.serial  # a pytest-xdist worker beside it would be a neighbour of its own
def test_the_load_probe_sees_a_neighbour_spinning_and_not_this_process(tmp_path):
    """Alone, this process's own work is not counted; beside a process that spins, about a core is busy."""
    probe = threads.LoadProbe()
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        pass
    alone = probe.others_busy()
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # its interpreter started
        probe = threads.LoadProbe()
        time.sleep(0.6)
        beside = probe.others_busy()
    finally:
        spinner.kill()
        spinner.wait()
    if alone is None:
        pytest.skip("no /proc/stat here")
    assert alone < 0.5 and 0.7 < beside < 1.5, (alone, beside)
