"""Every command meets bad input as run.py does: one line on stderr, `error: <message>`, exit code 2, no traceback
(utils/cli.py). The table runs each command's main in this process through cli.run, as its `__main__` does; every
`__main__` is checked to go through cli.run, and a few commands are started as a user starts them."""
import ast
import glob
import importlib
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import REPO
from utils import cli

# (command, its arguments, what the one line says); {missing}, {empty} (a folder without runs), {series} (a folder
# of three series files), {out} (a folder to write in) name the test's paths
BAD_INPUT = [
    ("scripts.sweep", ["--model", "dlinear", "--pred_len", "96"], "unrecognized arguments: --pred_len 96"),
    ("scripts.sweep", ["--workers", "two", "--model", "dlinear"], "argument --workers: expected an integer, got 'two'"),
    ("scripts.sweep", ["--nproc", "0", "--model", "dlinear"], "argument --nproc: must be >= 1, got 0"),
    ("scripts.sweep", ["--paper", "dlinear", "--datasets", "ETTh9"], "dataset ETTh9 is not a benchmark"),
    ("scripts.sweep", ["--model", "dlinear", "--seq_len", "96,abc"],
     "cell 001_dlinear_synthetic: argument --seq_len: invalid int value: 'abc'"),
    ("scripts.tune", ["--trials", "0", "--model", "dlinear"], "argument --trials: must be >= 1, got 0"),
    ("scripts.tune", ["--trials", "2", "--model", "dlinaer"], "unknown model 'dlinaer'"),
    ("scripts.tune", ["--trials", "2", "--model", "dlinear", "--nonautoregressive", "--space", "d_model=64,128"],
     "--space d_model: not a hyper-parameter of dlinear"),
    ("scripts.tune", ["--trials", "2", "--model", "patchtst", "--nonautoregressive", "--space", "d_model=a:b"],
     "--space d_model=a:b: 'a' is not a value of --d_model"),
    ("analysis.report", ["{missing}"], "argument results_dir: no such folder"),
    ("analysis.report", ["{empty}"], "no metrics.json of a run under"),
    ("analysis.report", ["{empty}", "--reference", "{missing}/paper.csv"], "argument --reference: no such file"),
    ("analysis.compare", ["{empty}", "--ranks"], "no metrics.json of a run under"),
    ("analysis.compare", ["{empty}", "--ranks", "--alpha", "5"], "--alpha must lie in (0, 1), got 5.0"),
    ("data_provider.corpus", ["build", "{series}", "--split", "0.9,0.1"], "expected three fractions train,val,test"),
    ("data_provider.corpus", ["build", "{series}", "--split", "0.9,0.2,0.1"], "fractions >= 0 summing to 1"),
    ("data_provider.corpus", ["generate", "{out}", "--series", "0"], "--series must be >= 1, got 0"),
    ("data_provider.synthetic", ["--out", "{out}/s.csv", "--length", "-5"], "argument --length: must be >= 1, got -5"),
    ("scripts.pretrain.zero_shot", ["--data_root", "{empty}", "--out", "{out}", "--targets", "ETTh2"],
     "--targets ETTh2: the targets are ETTh1, ILI"),
    ("scripts.pretrain.zero_shot", ["--data_root", "{empty}", "--out", "{out}", "--targets", "ILI"],
     "no illness/national_illness.csv under --data_root"),
    ("scripts.benchmark.paper_cost", ["--models", "dlinear", "--data_root", "{missing}"],
     "argument --data_root: no such folder"),
    ("scripts.benchmark.paper_cost", ["--models", "dlinear", "--data_root", "{empty}", "--horizons", "96"],
     "data file not found"),
    ("scripts.benchmark.throughput", ["--data_root", "{empty}", "--steps", "0"], "argument --steps: must be >= 1"),
    ("scripts.benchmark.time_to_table", ["--data_root", "{empty}", "--model", "dlinaer"],
     "no paper-setting script scripts/long_term_forecast/dlinaer_ETTh1.sh"),
    ("scripts.benchmark.fsdp_memory", ["--configs", "ddp,zero"], "--configs zero: the configurations are ddp,"),
    ("scripts.benchmark.fsdp_memory", ["--models", "timer_xl,timerxl"], "--models timerxl: unknown model"),
    ("scripts.benchmark.corpus", ["--dir", "{out}", "--only", "loader,trian"], "--only trian: the parts are"),
]
# started as a user starts them: the sweep, and commands that import little
STARTED = [
    ("scripts.sweep", ["--model", "dlinear", "--pred_len", "96"], "unrecognized arguments: --pred_len 96"),
    ("analysis.report", ["{missing}"], "argument results_dir: no such folder"),
    ("data_provider.synthetic", ["--length", "many"], "argument --length: expected an integer, got 'many'"),
    ("scripts.benchmark.fsdp_memory", ["--nproc", "0"], "argument --nproc: must be >= 1, got 0"),
]


def _main_block(path: str):
    """The `if __name__ == "__main__":` block of a module (None: it has none)."""
    tree = ast.parse(open(path).read())
    return next((node for node in tree.body if isinstance(node, ast.If) and
                 ast.unparse(node.test) == "__name__ == '__main__'"), None)


# every benchmark that takes input: scaling prints its tables and reads no argument
BENCHMARKS = sorted(f"scripts.benchmark.{os.path.basename(path)[:-3]}"
                    for path in glob.glob(os.path.join(REPO, "scripts", "benchmark", "*.py"))
                    if _main_block(path) and not path.endswith("scaling.py"))
COMMANDS = ["scripts.sweep", "scripts.tune", "analysis.report", "analysis.compare", "data_provider.corpus",
            "data_provider.synthetic", "scripts.pretrain.zero_shot", *BENCHMARKS]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("entry_points")
    for name in ("empty", "series", "out"):
        (root / name).mkdir()
    for i in range(3):
        np.save(root / "series" / f"s{i}.npy", np.random.default_rng(i).standard_normal(200).astype(np.float32))
    return {"missing": str(root / "missing"), **{name: str(root / name) for name in ("empty", "series", "out")}}


def _one_error_line(err: str, message: str) -> str:
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], err
    assert "Traceback" not in err, err
    return errors[0]


@pytest.mark.parametrize("command, argv, message", BAD_INPUT, ids=[f"{c}:{' '.join(a)}" for c, a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_code_2(command, argv, message, paths, capsys):
    main = importlib.import_module(command).main
    with pytest.raises(SystemExit) as leaving:
        cli.run(main, [a.format(**paths) for a in argv])
    assert leaving.value.code == 2
    _one_error_line(capsys.readouterr().err, message)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_leaves_through_cli_run(command):
    block = _main_block(os.path.join(REPO, *command.split(".")) + ".py")
    assert "cli.run(main" in ast.unparse(block), f"{command}: its __main__ must call cli.run(main)"


@pytest.mark.slow  # each a Python process
@pytest.mark.parametrize("command, argv, message", STARTED, ids=[c for c, _, _ in STARTED])
def test_a_command_started_with_bad_input_prints_one_line_and_exits_2(command, argv, message, paths):
    proc = subprocess.run([sys.executable, "-m", command, *[a.format(**paths) for a in argv]], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip() == _one_error_line(proc.stderr, message)


def test_a_failed_run_is_reported_by_its_own_error_line():
    torchrun = ("[rank 1] error: unknown model 'x'\nerror: unknown model 'x'\n"
                "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n  error_file: <N/A>\n")
    assert cli.error_line(torchrun, "?") == "unknown model 'x'"
    assert cli.error_line("ValueError: bad\n", "?") == "ValueError: bad"
    assert cli.error_line("", "it failed") == "it failed"
