"""What the benchmarks share: a run.py job under torchrun, and the figures it logs."""
import os
import re
import subprocess
import time

from scripts.sweep import HERE, torchrun_command
from utils import cli
from utils.errors import TrainingError


def torchrun(nproc: int, flags: list) -> tuple[str, float]:
    """`torchrun --standalone --nproc_per_node NPROC run.py --ddp FLAGS`, one thread per rank: (its log, its wall
    seconds with start-up). A failed run ends the benchmark with its error line."""
    cmd = torchrun_command(nproc, [os.path.join(HERE, "run.py"), "--ddp", *flags])
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=HERE)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise TrainingError(f"{cli.error_line(proc.stderr, 'the run failed')} (in: torchrun ... run.py --ddp "
                            f"{' '.join(flags)})")
    return proc.stderr, wall


def peak_rss(log: str) -> str:
    """Every rank's peak RSS in MB, as the run logged it ("751, 750")."""
    return re.search(r"peak memory \(RSS\) per rank: ([\d, ]+) MB", log).group(1)


def train_seconds(log: str) -> float:
    """Seconds spent training (evaluation left out), summed over the rows of the history."""
    return sum(float(s) for s in re.findall(r"\| ([\d.]+)s \+ [\d.]+s eval", log))
