"""Bad input: one clear error line, exit code != 0, no traceback, and no hang under DDP.

The cases are the rows of the bad-input table in docs/distributed.md; a test keeps the two in step.
"""
import json
import os
import signal
import sys
import time

import numpy as np
import pandas as pd
import pytest
import torch

import run
from data_provider import synthetic
from tests.conftest import REPO, m4_files, m4_like
from utils import interrupt


def _write(tmp_path, name, frame):
    frame.to_csv(tmp_path / name, index=False)
    return ["--data", "custom", "--root_path", str(tmp_path), "--data_path", name]


def _short_ett(p, f):
    flags = _write(p, "ETTh1.csv", _frame(n=300))
    flags[flags.index("custom")] = "ETTh1"
    return flags


def _frame(n=300, **columns):
    frame = pd.DataFrame({"date": pd.date_range("2020", periods=n, freq="h"), "a": np.arange(n, dtype=float),
                          "OT": np.sin(np.arange(n))})
    for k, v in columns.items():
        frame[k] = v
    return frame


def _binary(tmp_path, flags):
    (tmp_path / "t.csv").write_bytes(bytes(range(256)) * 8)
    return ["--data", "custom", "--root_path", str(tmp_path), "--data_path", "t.csv"]


def _unsafe_checkpoint(tmp_path, flags):
    class RunsCode:
        def __reduce__(self):
            return os.system, ("true",)
    os.makedirs(tmp_path / "unsafe")
    torch.save({"model": RunsCode()}, tmp_path / "unsafe" / "checkpoint.pth")
    return ["--is_training", "0", "--checkpoints", str(tmp_path), "--test_dir", "unsafe"]


def _corpus(tmp_path, length):
    """Two series of `length` points as .npy files in a folder, as --data corpus (and a file named a in the way)."""
    os.makedirs(tmp_path / "series")
    for name in ("a.npy", "b.npy"):
        np.save(tmp_path / "series" / name, np.sin(np.arange(length) / 5.0))
    (tmp_path / "a").write_text("")
    return ["--data", "corpus", "--root_path", str(tmp_path / "series")]


def _changed_corpus(tmp_path, flags):
    corpus = _corpus(tmp_path, 2000)
    run.main(flags + corpus + ["--train_epochs", "1"])
    np.save(tmp_path / "series" / "c.npy", np.arange(500.0))
    return corpus + ["--des", "again"]


def _file_in_the_way(tmp_path, flags):
    (tmp_path / "a_file").write_text("")
    return ["--results_dir", str(tmp_path / "a_file" / "results")]


def _dates(order):
    frame = _frame()
    frame["date"] = frame["date"].to_numpy()[order]
    return frame


def _dates_as(date_format):
    frame = _frame()
    frame["date"] = frame["date"].dt.strftime(date_format)
    return frame


def _finished(tmp_path, flags):
    run.main(flags + ["--train_epochs", "1"])
    return ["--train_epochs", "1"]


def _results_without_checkpoints(tmp_path, flags):
    return _finished(tmp_path, flags) + ["--checkpoints", str(tmp_path / "other_checkpoints")]


def _unfinished(tmp_path, flags):
    class CtrlC:
        def on_train_step(self, epoch, step, loss):
            if epoch == 2:
                raise interrupt.Interrupted(signal.SIGINT)
            return loss
    with pytest.raises(interrupt.Interrupted):
        run.main(flags, callbacks=[CtrlC()])
    return []


def _other_data(tmp_path, flags):
    setting = run.main(flags + ["--train_epochs", "1"])[0]["metrics"]["setting"]
    return ["--is_training", "0", "--test_dir", setting] + _write(tmp_path, "other.csv", _frame())


def _run_in_use(tmp_path, flags):
    """A run whose lock records a live launch on another host (a fresh heartbeat): one the kernel lock of this
    host cannot see."""
    setting = run.main(flags + ["--train_epochs", "1"])[0]["metrics"]["setting"]
    record = tmp_path / "ckpt" / ".locks" / f"{setting}.lock"
    record.write_text(json.dumps({"host": "node7", "pid": 4242, "since": "12:00:00", "command": "run.py ...",
                                  "heartbeat": time.time()}))
    return ["--train_epochs", "1", "--resume", "auto"]


def _data_edited_since_training(tmp_path, flags):
    """The data file changed in its middle after training, its size kept: testing the run on it is refused."""
    big = tmp_path / "big.csv"
    synthetic.write_csv(synthetic.generate(length=4000, n_covariates=2, seed=1), str(big))
    data = ["--data", "custom", "--root_path", str(tmp_path), "--data_path", "big.csv", "--train_epochs", "1"]
    setting = run.main(flags + data)[0]["metrics"]["setting"]
    lines = big.read_text().splitlines(keepends=True)
    lines[2000] = lines[2000][:-2] + ("1" if lines[2000][-2] != "1" else "2") + "\n"
    big.write_text("".join(lines))
    return data + ["--is_training", "0", "--test_dir", setting]
# row of the documented table -> (maker(tmp folder, the test's run.py flags) -> flags to add, the error's telling part)
def _m4(tmp_path, series_length=60, with_ids=True):
    """Weekly-shaped M4 files (horizon 13) of three series, and the flags of a short-term run on them with the
    protocol's lengths (the test's other flags name other ones)."""
    train, test = m4_like(3, 13, 4, (series_length, series_length + 1))
    m4_files(tmp_path, "Weekly", train, test)
    if not with_ids:  # the id column dropped: the first value takes its place
        for split in ("train", "test"):
            path = tmp_path / f"Weekly-{split}.csv"
            path.write_text("\n".join(line.split(",", 1)[1] for line in path.read_text().splitlines()) + "\n")
    return ["--task", "short_term", "--data", "m4", "--root_path", str(tmp_path), "--seasonal_patterns", "Weekly",
            "--model", "dlinear", "--seq_len", "26", "--output_token_len", "13"]


CASES = {
    "unknown M4 subset": (lambda p, f: ["--task", "short_term", "--data", "m4", "--seasonal_patterns", "Minutely"],
                          "--seasonal_patterns Minutely: the M4 subsets are Yearly, Quarterly, Monthly, Weekly, "
                          "Daily, Hourly"),
    "--data m4 without the short-term task": (lambda p, f: ["--data", "m4"],
                                              "--data m4 is the short-term task's: add --task short_term"),
    "short-term flags in the long-term task": (lambda p, f: ["--seasonal_patterns", "Hourly"],
                                               "--seasonal_patterns: the short-term task's (--task short_term "
                                               "--data m4)"),
    "covariates in the short-term task": (lambda p, f: [*_m4(p), "--covariate"],
                                          "--covariate (TSLib's --features MS) reads other channels: M4's series are "
                                          "univariate"),
    "lengths the M4 protocol fixes": (lambda p, f: [*_m4(p), "--seq_len", "48"],
                                      "--seq_len 48: the M4 Weekly protocol fixes the horizon at 13 and the lookback "
                                      "at --lookback_multiple x horizon = 26; drop them"),
    "M4 file without the id column": (lambda p, f: _m4(p, with_ids=False),
                                      "Weekly-train.csv: its first column holds numbers, not the series' ids"),
    "M4 series no longer than its horizon": (lambda p, f: _m4(p, series_length=13),
                                             "Weekly-train.csv: 3 series have no more than the horizon's 13 values: "
                                             "nothing is left to train on once it is held out"),
    "missing file": (lambda p, f: ["--data", "custom", "--root_path", str(p), "--data_path", "nope.csv"],
                     "data file not found"),
    "unreadable file": (_binary, "cannot read as CSV"),
    "unknown model": (lambda p, f: ["--model", "nope"], "unknown model 'nope'"),
    "unknown data": (lambda p, f: ["--data", "nope"], "unknown --data 'nope'; available: "),
    "benchmark file shorter than its split": (_short_ett, "ETTh1 needs at least 14400 rows for its standard split"),
    "--target for a file without column names": (lambda p, f: ["--data", "Solar", "--target", "OT"],
                                                 "Solar files have no column names; the last column is the target"),
    "non-numeric column": (lambda p, f: _write(p, "t.csv", _frame(a=["x"] * 300)), "non-numeric column"),
    "empty column": (lambda p, f: _write(p, "t.csv", _frame(a=[np.nan] * 300)), "empty column"),
    "NaN or inf values": (lambda p, f: _write(p, "t.csv", _frame(OT=[np.inf] + [1.0] * 299)), "NaN/inf values"),
    "CSV without a date column": (lambda p, f: _write(p, "t.csv", _frame().drop(columns="date")),
                                  "the first column 'a' holds numbers, not dates: the CSV format needs a date column"),
    "day-first dates without --dayfirst": (lambda p, f: _write(p, "t.csv", _dates_as("%d/%m/%Y %H:%M")),
                                           "does not match the format %m/%d/%Y %H:%M of the first date '01/01/2020 "
                                           "00:00': for day-first dates add --dayfirst"),
    "date not in --date_format": (lambda p, f: _write(p, "t.csv", _frame()) + ["--date_format", "%d.%m.%Y %H:%M"],
                                  "the date '2020-01-01 00:00:00' at row 0 does not match --date_format"),
    "timestamps out of order": (lambda p, f: _write(p, "t.csv", _dates([0, 1, 2, 4, 3] + list(range(5, 300)))),
                                "timestamps out of order at rows 3 and 4"),
    "duplicated timestamps": (lambda p, f: _write(p, "t.csv", _dates([0, 1, 1] + list(range(3, 300)))),
                              "timestamps duplicated at rows 1 and 2"),
    "split shorter than a window": (lambda p, f: _write(p, "t.csv", _frame(n=120)), "split has"),
    "incompatible token lengths": (lambda p, f: ["--input_token_len", "20"],
                                   "must be a multiple of --input_token_len"),
    "unknown schedule": (lambda p, f: ["--lradj", "nope"], "unknown --lradj 'nope'; available: TST, constant"),
    "unknown protocol": (lambda p, f: ["--protocol", "nope"], "unknown --protocol 'nope'; available: tfb, tslib"),
    "a dropped test window under TFB's protocol": (lambda p, f: ["--protocol", "tfb", "--test_drop_last"],
                                                   "--test_drop_last: the tfb protocol scores every test window"),
    "batch_size < 1": (lambda p, f: ["--batch_size", "0"], "--batch_size must be >= 1"),
    "batch larger than the training split": (lambda p, f: ["--batch_size", "400"], "fewer than one step"),
    "mode the model lacks": (lambda p, f: ["--model", "dlinear"], "is not autoregressive"),
    "covariates for a channel-independent model": (lambda p, f: ["--model", "patchtst", "--nonautoregressive",
                                                                 "--covariate"], "channel-independent"),
    "plot_channel out of range": (lambda p, f: ["--visualize", "--plot_channel", "3"],
                                  "--plot_channel 3 is out of range: the data has 3 channels"),
    "results dir not writable": (_file_in_the_way, "cannot write there"),
    "results dir where no file can be made": (lambda p, f: ["--results_dir", "/proc/tsf_results"],
                                              "--results_dir /proc/tsf_results: cannot write there (No such file"),
    "run in use by another launch": (_run_in_use, "is in use by another launch: pid 4242 on host node7 since "
                                                  "12:00:00 (run.py ...); wait for it to end or stop it"),
    "data file edited since training": (_data_edited_since_training,
                                        "it was trained with other flags: fingerprint: 311227-"),
    "--threads < 1": (lambda p, f: ["--threads", "0"], "--threads must be >= 1, got 0"),
    "--ddp without torchrun": (lambda p, f: ["--ddp"], "needs a torchrun launch"),
    "test without a checkpoint": (lambda p, f: ["--is_training", "0"], "no checkpoint at"),
    "checkpoint of other data": (_other_data, "it was trained with other flags: file: tiny.csv -> other.csv"),
    "finished run trained again": (_finished, "this run has already finished"),
    "unfinished run": (_unfinished, "an unfinished run of this configuration"),
    "results without their checkpoints": (_results_without_checkpoints,
                                          "does not hold its checkpoints: pass the --checkpoints it was trained with"),
    "checkpoint that would run code": (_unsafe_checkpoint, "refusing to load"),
    "--resume path missing": (lambda p, f: ["--resume", str(p / "nope.pth")], "no such checkpoint"),
    "corpus without series files": (lambda p, f: ["--data", "corpus", "--root_path", str(p)], "no series files"),
    "corpus of series too short": (lambda p, f: _corpus(p, 60), "no series of corpus"),
    "corpus whose files changed": (_changed_corpus, "1 file(s) new since it was built, e.g. c.npy"),
    "corpus store not writable": (lambda p, f: _corpus(p, 2000) + ["--corpus_store", str(p / "a" / "s")],
                                  "cannot write the corpus store"),
    "--val_every without --train_steps": (lambda p, f: ["--val_every", "10"],
                                           "--val_every and --save_every count steps of a --train_steps run"),
    "pretrained weights without a use": (lambda p, f: ["--pretrain_model_path", str(p / "w.pth")],
                                         "add --adaptation to fine-tune from it, or --is_training 0"),
    "--fsdp without --ddp": (lambda p, f: ["--fsdp"], "--fsdp shards the model across the ranks of a torchrun job"),
    "--fsdp with --zero": (lambda p, f: ["--fsdp", "--zero"], "--fsdp shards the optimizer state already"),
    "--fsdp with --compile": (lambda p, f: ["--fsdp", "--compile"], "--fsdp with --compile is not supported"),
    "--fsdp with --find_unused_parameters": (lambda p, f: ["--fsdp", "--find_unused_parameters"],
                                              "--fsdp needs every rank to use every parameter in each step"),
    "--cpu_offload without --fsdp": (lambda p, f: ["--cpu_offload"], "--cpu_offload moves the shards of --fsdp"),
    "--cpu_offload on a CPU run": (lambda p, f: ["--fsdp", "--cpu_offload"], "a CPU run holds everything there"),
    "--amp_dtype without --use_amp": (lambda p, f: ["--amp_dtype", "bf16"],
                                      "--amp_dtype chooses --use_amp's precision"),
    "--amp_dtype fp16 under --fsdp": (lambda p, f: ["--fsdp", "--use_amp", "--amp_dtype", "fp16"],
                                      "keeps no loss scale for fp16: drop --amp_dtype fp16"),
    "quantile levels out of order or repeated": (lambda p, f: ["--loss", "quantile", "--quantiles", "0.9,0.1"],
                                                 "--quantiles 0.9,0.1: give each level once, in increasing order"),
    "quantile levels outside (0, 1)": (lambda p, f: ["--loss", "quantile", "--quantiles", "0,0.5"],
                                       "--quantiles 0,0.5: each level must be in (0, 1)"),
    "several values per point from a decoder that feeds its forecast back": (
        lambda p, f: ["--model", "segrnn", "--nonautoregressive", "--seg_len", "16", "--dec_way", "rmf", "--loss",
                      "quantile"], "SegRNN's rmf decoding feeds its point forecast back"),
    "no sample paths": (lambda p, f: ["--loss", "gaussian", "--num_samples", "0"],
                        "--num_samples 0: draw at least 2 sample paths per window"),
    "samples asked of a quantile forecast": (
        lambda p, f: ["--loss", "quantile", "--num_samples", "100"],
        "--num_samples: --loss quantile forecasts quantiles, not a distribution to sample: its CRPS is computed from "
        "them (crps, on the --quantiles grid)"),
    "--activation_checkpointing for a model without blocks": (
        lambda p, f: ["--model", "dlinear", "--nonautoregressive", "--activation_checkpointing"],
        "--activation_checkpointing recomputes a model's blocks"),
}
_LINEAR_MODEL = """from dataclasses import dataclass
from torch import nn
from models.base import Capabilities


class Model(nn.Module):
    \"\"\"{doc}\"\"\"
    capabilities = Capabilities(direct=True)

    @dataclass
    class Config:
        pass

    def __init__(self, configs):
        super().__init__()
        self.linear = nn.Linear(configs.seq_len, {width})

    def forward(self, x, x_mark=None):
        return self.linear(x.transpose(1, 2)).transpose(1, 2)
"""
POINT_ONLY = _LINEAR_MODEL.format(doc="One value per forecast point (no multi_output).",
                                  width="configs.output_token_len")
WRONG_SHAPE = _LINEAR_MODEL.format(doc="Forecasts one step too few.", width="configs.output_token_len - 1")


def _script_without_data(tmp_path, repo, flags):
    env = {"DATA_ROOT": str(tmp_path / "no_data"), "HORIZONS": "24", "CHECKPOINTS": str(tmp_path / "c"),
           "RESULTS": str(tmp_path / "r")}
    return ["bash", str(repo / "scripts" / "long_term_forecast" / "dlinear_ILI.sh"), "--train_epochs", "1"], env


def _model_file(name, text, *extra):
    def make(tmp_path, repo, flags):
        (repo / "models" / f"{name}.py").write_text(text)
        return [sys.executable, str(repo / "run.py"), *flags, "--model", name, "--nonautoregressive", *extra], {}
    return make


def _registry_file(path, text):
    def make(tmp_path, repo, flags):
        (repo / path).write_text(text)
        return [sys.executable, str(repo / "run.py"), *flags], {}
    return make
# rows that need a command line of their own (a script, a model file added to a copy of the code):
# maker(tmp folder, copy of the code, the test's run.py flags) -> (command, environment), the error's telling part
CLI_CASES = {
    "missing data in a script": (_script_without_data, "the script reads its data under DATA_ROOT="),
    "broken file in models/": (_model_file("broken", "import not_a_module_anywhere\n"),
                               "models/broken.py cannot be imported: ModuleNotFoundError"),
    "broken file in utils/metrics/": (_registry_file("utils/metrics/broken.py", "METRICS = ['not a metric']\n"),
                                      "utils/metrics/broken.py: METRICS must be a list of utils.metrics.Metric"),
    "broken file in data_provider/datasets/": (
        _registry_file("data_provider/datasets/broken.py", "DATASETS = ['not a dataset']\n"),
        "data_provider/datasets/broken.py: DATASETS must be a list of data_provider.datasets.Dataset"),
    "a probabilistic loss for a model of one value per point": (
        _model_file("pointonly", POINT_ONLY, "--loss", "gaussian"),
        "--loss gaussian needs 2 values per forecast point: model pointonly returns one"),
    "model output of the wrong shape": (_model_file("short", WRONG_SHAPE),
                                        "model short returned shape (1, 15, 3) for one window, expected (1, 16, 3)"),
}
# rows that need two nodes: the test in tests/system/test_fault_tolerance.py that holds each
NODE_CASES = {"data file differing between nodes": "test_nodes_that_do_not_share_data_or_folders_stop_at_start_up",
              "folders the nodes do not share": "test_nodes_that_do_not_share_data_or_folders_stop_at_start_up"}


def test_every_row_of_the_documented_table_is_tested():
    doc = open(os.path.join(REPO, "docs", "distributed.md")).read()
    table = doc[doc.index("| bad input |"):].split("\n\n")[0]
    rows = [line.split("|")[1].strip().replace("`", "") for line in table.splitlines()[2:]]
    assert sorted(rows) == sorted([*CASES, *CLI_CASES, *NODE_CASES])
    from tests.system import test_fault_tolerance
    assert all(hasattr(test_fault_tolerance, name) for name in NODE_CASES.values())
