"""Bad input: one clear error line, exit code != 0, no traceback, and no hang under DDP.

The cases are the rows of the bad-input table in docs/distributed.md; a test keeps the two in step.
"""
import os
import time

import numpy as np
import pytest

from tests.conftest import REPO, run_cli, run_process
from tests.unit.test_bad_input import CLI_CASES, _frame, _write


@pytest.mark.parametrize("case", sorted(CLI_CASES))
def test_bad_input_on_the_command_line_is_one_clear_error(tiny_args, tmp_path, repo_copy, case):
    make, message = CLI_CASES[case]
    cmd, env = make(tmp_path, repo_copy, tiny_args)
    proc = run_process(cmd, 120, {**os.environ, "OMP_NUM_THREADS": "1", **env}, repo_copy)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_cli_reports_a_user_error_in_one_line_with_exit_code_2(tiny_args, tmp_path):
    proc = run_cli(tiny_args + ["--seq_len", "50"], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: --seq_len 50 must be a multiple of --input_token_len 16"]


def test_bad_input_under_ddp_ends_every_rank(tiny_args, tmp_path):
    args = tiny_args + _write(tmp_path, "t.csv", _frame(a=[np.nan] + [1.0] * 299))
    start = time.time()
    proc = run_cli(args, tmp_path, timeout=120, nproc=2)
    assert proc.returncode != 0 and time.time() - start < 60
    # both ranks fail alike; the first to exit makes torchrun stop the other, which may not get to print
    errors = [line for line in proc.stderr.splitlines() if "error: " in line and "NaN/inf" in line]
    assert 1 <= len(errors) <= 2, proc.stderr[-2000:]
    assert f'{REPO}/run.py", line' not in proc.stderr, "a user error prints no traceback of ours (torchrun adds its own)"
