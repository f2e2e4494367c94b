"""Bad input: one clear error line, exit code != 0, no traceback, and no hang under DDP.

The cases are the rows of the README's bad-input table; a test keeps the two in step.
"""
import os
import re
import time

import numpy as np
import pandas as pd
import pytest
import torch

import run
from data_provider.factory import build_data
from tests.conftest import REPO, run_cli
from utils.args import parse_args, validate
from utils.dist import DistEnv
from utils.errors import ConfigError


def _write(tmp_path, name, frame):
    frame.to_csv(tmp_path / name, index=False)
    return ["--data", "custom", "--root_path", str(tmp_path), "--data_path", name]


def _frame(n=300, **columns):
    frame = pd.DataFrame({"date": pd.date_range("2020", periods=n, freq="h"), "a": np.arange(n, dtype=float),
                          "OT": np.sin(np.arange(n))})
    for k, v in columns.items():
        frame[k] = v
    return frame


def _binary(tmp_path):
    (tmp_path / "t.csv").write_bytes(bytes(range(256)) * 8)
    return ["--data", "custom", "--root_path", str(tmp_path), "--data_path", "t.csv"]


def _unsafe_checkpoint(tmp_path):
    class RunsCode:
        def __reduce__(self):
            return os.system, ("true",)
    os.makedirs(tmp_path / "unsafe")
    torch.save({"model": RunsCode()}, tmp_path / "unsafe" / "checkpoint.pth")
    return ["--is_training", "0", "--checkpoints", str(tmp_path), "--test_dir", "unsafe"]


def _file_in_the_way(tmp_path):
    (tmp_path / "a_file").write_text("")
    return ["--results_dir", str(tmp_path / "a_file" / "results")]


# README row name -> (run.py flags for a tmp folder, the error's telling part)
CASES = {
    "missing file": (lambda p: ["--data", "custom", "--root_path", str(p), "--data_path", "nope.csv"],
                     "data file not found"),
    "unreadable file": (_binary, "cannot read as CSV"),
    "unknown model": (lambda p: ["--model", "nope"], "unknown model 'nope'"),
    "unknown data": (lambda p: ["--data", "nope"], "invalid choice: 'nope'"),
    "non-numeric column": (lambda p: _write(p, "t.csv", _frame(a=["x"] * 300)), "non-numeric column"),
    "empty column": (lambda p: _write(p, "t.csv", _frame(a=[np.nan] * 300)), "empty column"),
    "NaN or inf values": (lambda p: _write(p, "t.csv", _frame(OT=[np.inf] + [1.0] * 299)), "NaN/inf values"),
    "split shorter than a window": (lambda p: _write(p, "t.csv", _frame(n=120)), "split has"),
    "incompatible token lengths": (lambda p: ["--input_token_len", "20"], "must be a multiple of --input_token_len"),
    "batch_size < 1": (lambda p: ["--batch_size", "0"], "--batch_size must be >= 1"),
    "batch larger than the training split": (lambda p: ["--batch_size", "400"], "fewer than one step"),
    "mode the model lacks": (lambda p: ["--model", "dlinear"], "is not autoregressive"),
    "covariates for a channel-independent model": (lambda p: ["--model", "patchtst", "--nonautoregressive",
                                                              "--covariate"], "channel-independent"),
    "results dir not writable": (_file_in_the_way, "cannot write there"),
    "--ddp without torchrun": (lambda p: ["--ddp"], "needs a torchrun launch"),
    "test without a checkpoint": (lambda p: ["--is_training", "0"], "no checkpoint at"),
    "checkpoint that would run code": (_unsafe_checkpoint, "refusing to load"),
    "--resume path missing": (lambda p: ["--resume", str(p / "nope.pth")], "no such checkpoint"),
}
GROUP_CASE = "more ranks than validation windows"  # needs a world size: tested with a fake one below


def test_every_readme_row_is_tested():
    readme = open(os.path.join(REPO, "README.md")).read()
    table = readme[readme.index("| bad input |"):].split("\n\n")[0]
    rows = [line.split("|")[1].strip().replace("`", "") for line in table.splitlines()[2:]]
    assert sorted(rows) == sorted([*CASES, GROUP_CASE])


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_clear_error(tiny_args, tmp_path, case):
    make, message = CASES[case]
    with pytest.raises(ConfigError, match=re.escape(message)):
        run.main(tiny_args + make(tmp_path))


def test_more_ranks_than_validation_windows_for_a_fake_world(tiny_args):
    args = parse_args(tiny_args + ["--batch_size", "1"])
    validate(args)
    data = build_data(args, torch.device("cpu"), True, False)
    run.preflight(args, DistEnv(0, 0, 46, torch.device("cpu"), "gloo", True), data)  # 46 val windows: fine
    with pytest.raises(ConfigError, match="world size 47 exceeds the 46 val windows"):
        run.preflight(args, DistEnv(3, 3, 47, torch.device("cpu"), "gloo", True), data)


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
