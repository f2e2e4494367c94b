"""Paper reproduction tooling: the report against published numbers, plots, the drop-last emulation."""
import json
import os
import subprocess

import pytest

from analysis import report
from exp.config import parse_args, resolve
from exp.identity import run_config
from tests.conftest import REPO
from tests.integration.test_reproduce import _paper_config


def test_paper_settings_are_what_the_scripts_run(tmp_path):
    """paper_settings.json is current with make_scripts.py's table, and equals what the generated script
    runs (its run.py command line, captured by a stand-in python)."""
    from scripts import make_scripts
    assert json.load(open(report.DEFAULT_SETTINGS)) == json.loads(json.dumps(make_scripts.paper_settings()))
    shim = tmp_path / "bin"
    os.makedirs(shim)
    (shim / "python").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'calls'}\n")
    os.chmod(shim / "python", 0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "HORIZONS": "192"}
    subprocess.run(["bash", os.path.join(REPO, "scripts", "long_term_forecast", "patchtst_ETTh1.sh")], env=env,
                   check=True)
    (call,) = (tmp_path / "calls").read_text().splitlines()
    args = resolve(parse_args(call.split()[1:]))  # after run.py
    config = run_config(args, "ETTh1.csv", None, world_size=1)
    del config["data"]["fingerprint"], config["training"]["seed"]
    assert config == _paper_config("patchtst", "ETTh1", 192)


def test_a_script_run_with_tune_searches_from_its_settings(tmp_path):
    """TUNE="..." bash scripts/...: each run a scripts.tune study whose base configuration is the script's run
    (N-HiTS's paper protocol, docs/reproducing.md); list-valued choices pass through the shell as given."""
    shim = tmp_path / "bin"
    os.makedirs(shim)
    (shim / "python").write_text(f"#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done >> {tmp_path / 'calls'}\n")
    os.chmod(shim / "python", 0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", "HORIZONS": "24",
           "TUNE": "--trials 10 --pruner none --space n_freq_downsample=168,24,1|24,12,1 --space seed=1:10"}
    subprocess.run(["bash", os.path.join(REPO, "scripts", "long_term_forecast", "nhits_ILI.sh")], env=env, check=True)
    call = (tmp_path / "calls").read_text().splitlines()
    assert call[:9] == ["-m", "scripts.tune", "--trials", "10", "--pruner", "none", "--space",
                        "n_freq_downsample=168,24,1|24,12,1", "--space"]
    assert call[call.index("--model") + 1] == "nhits" and call[call.index("--seq_len") + 1] == "120"


@pytest.mark.parametrize("script,variable,checkpoint", [("timer_xl_table13.sh", "TIMER", "timer-base-84m"),
                                                        ("time_moe_zero_shot.sh", "TIMEMOE", "TimeMoE-50M")])
def test_a_zero_shot_script_launches_runs_its_published_rows_match(tmp_path, script, variable, checkpoint):
    """scripts/zero_shot/: each horizon's run tests the checkpoint zero-shot at the lookback of the published row,
    named (--des) as that row's checkpoint, with flags the checkpoint accepts; without the checkpoint, one line."""
    pytest.importorskip("safetensors")
    folder = tmp_path / checkpoint
    if variable == "TIMER":
        from tests.unit.test_foundation_timer import write_checkpoint
        write_checkpoint(folder)
    else:
        from tests.unit.test_foundation_time_moe import random_weights, write
        write(folder, random_weights())
    shim = tmp_path / "bin"
    os.makedirs(shim)
    (shim / "python").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path / 'calls'}\n")
    os.chmod(shim / "python", 0o755)
    path = os.path.join(REPO, "scripts", "zero_shot", script)
    missing = subprocess.run(["bash", path], env={**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"},
                             capture_output=True, text=True)
    assert missing.returncode != 0 and f"set {variable} to the folder" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}", variable: str(folder)}
    subprocess.run(["bash", path], env=env, check=True)
    published = report.load_zero_shot_reference(report.DEFAULT_REFERENCE)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 4
    for call in calls:
        config = resolve(parse_args(call.split()[1:]))  # run.py's flags, as the checkpoint fixes them
        assert config.is_training == 0 and config.des == checkpoint and config.pretrained == str(folder)
        assert (config.model, "ETTh1", config.seq_len, config.output_token_len, checkpoint) in published
