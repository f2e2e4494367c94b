"""Every command meets bad input as run.py does: one line on stderr, `error: <message>`, exit code 2, no traceback
(utils/cli.py). The table runs each command's main in this process through cli.run, as its `__main__` does; every
`__main__` is checked to go through cli.run, and a few commands are started as a user starts them."""
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.integration.test_entry_points import _one_error_line
from utils import cli

# started as a user starts them: the sweep, and commands that import little
STARTED = [
    ("scripts.sweep", ["--model", "dlinear", "--pred_len", "96"], "unrecognized arguments: --pred_len 96"),
    ("analysis.report", ["{missing}"], "argument results_dir: no such folder"),
    ("data_provider.synthetic", ["--length", "many"], "argument --length: expected an integer, got 'many'"),
    ("scripts.benchmark.fsdp_memory", ["--nproc", "0"], "argument --nproc: must be >= 1, got 0"),
]


@pytest.mark.parametrize("command, argv, message", STARTED, ids=[c for c, _, _ in STARTED])
def test_a_command_started_with_bad_input_prints_one_line_and_exits_2(command, argv, message, command_paths):
    proc = subprocess.run([sys.executable, "-m", command, *[a.format(**command_paths) for a in argv]], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip() == _one_error_line(proc.stderr, message)


def test_a_failed_run_is_reported_by_its_own_error_line():
    torchrun = ("[rank 1] error: unknown model 'x'\nerror: unknown model 'x'\n"
                "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n  error_file: <N/A>\n")
    assert cli.error_line(torchrun, "?") == "unknown model 'x'"
    assert cli.error_line("ValueError: bad\n", "?") == "ValueError: bad"
    assert cli.error_line("", "it failed") == "it failed"
