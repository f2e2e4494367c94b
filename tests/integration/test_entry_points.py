"""Every command meets bad input as run.py does: one line on stderr, `error: <message>`, exit code 2, no traceback
(utils/cli.py). The table runs each command's main in this process through cli.run, as its `__main__` does; every
`__main__` is checked to go through cli.run, and a few commands are started as a user starts them."""
import importlib

import pytest

from utils import cli

# (command, its arguments, what the one line says); {missing}, {empty} (a folder without runs), {series} (a folder
# of three series files), {out} (a folder to write in) name the test's command_paths
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
    ("scripts.tune", ["--trials", "2", "--model", "dlinear", "--nonautoregressive", "--space", "seed=1:10",
                      "--final_seeds", "1"], "--final_seeds: the seed is searched (--space seed=...)"),
    ("scripts.reproduce.m4_benchmarks", ["--data_root", "{empty}", "--stats_python", "{missing}/python"],
     "cannot import statsforecast there; make that environment with: python3 -m venv .venv-m4"),
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
    ("scripts.benchmark.fsdp_memory", ["--configs", "ddp,lora"], "--configs lora and fsdp_lora fine-tune a published"),
    ("scripts.benchmark.foundation", ["--models", "chronos_bolt,moirai"], "--models chronos_bolt,moirai: choose among"),
    ("scripts.benchmark.foundation", ["--windows", "0"], "--windows must be >= 1, got 0"),
    ("scripts.benchmark.gpu_check", ["--out", "{out}", "--device", "cpu", "--parts", "models,fdsp"],
     "--parts fdsp: the parts are models, throughput, fsdp"),
    ("scripts.benchmark.gpu_check", ["--out", "{out}", "--device", "cpu", "--models", "dlinear,dlinaer"],
     "dlinaer: unknown model"),
    ("scripts.benchmark.gpu_check", ["--out", "{out}", "--device", "cpu", "--precisions", "fp8"],
     "--precisions fp8: the precisions are fp32, fp16, bf16"),
    ("scripts.benchmark.gpu_check", ["--out", "{out}", "--tslib", "{missing}"], "no such folder"),
]


def _one_error_line(err: str, message: str) -> str:
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], err
    assert "Traceback" not in err, err
    return errors[0]


@pytest.mark.parametrize("command, argv, message", BAD_INPUT, ids=[f"{c}:{' '.join(a)}" for c, a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_code_2(command, argv, message, command_paths, capsys):
    main = importlib.import_module(command).main
    with pytest.raises(SystemExit) as leaving:
        cli.run(main, [a.format(**command_paths) for a in argv])
    assert leaving.value.code == 2
    _one_error_line(capsys.readouterr().err, message)
