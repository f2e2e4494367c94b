"""Paper reproduction tooling: the report against published numbers, plots, the drop-last emulation."""
import json
import os
import subprocess

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
