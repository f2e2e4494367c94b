"""The CUDA path checked in one command: every model trained in fp32, fp16 + GradScaler and bf16 (and compiled),
throughput against the model-only limit and Time-Series-Library's own loop, FSDP with CPU offload and activation
checkpointing; one JSON and one markdown table, with the GPU's name and the commit.

    python -m scripts.benchmark.gpu_check --out DIR [--tslib DIR] [--commit SHA]   # one GPU: 11-13 min on an H200
    python -m scripts.benchmark.gpu_check --out DIR --device cpu --tiny --models dlinear  # the suite's check

Parts (--parts; each configuration that fails is recorded with its error line, and the check goes on; they run as
throughput, fsdp, then models, the longest, so that a time limit cuts off only the last models' rows):
  models      every registered model (--models) trained --steps optimizer steps then as many again (the step time
              is the second half's), validated and tested on --windows windows, at batch --batch_size: in fp32, with
              --use_amp --amp_dtype fp16 (GradScaler) and with --use_amp --amp_dtype bf16; --compile_models also
              compiled (fp32). Each model at its ETTh1 script's hyper-parameters (scripts/make_scripts.py; its
              defaults where it has none; --tiny: its contract-test values), lookback 192, tokens and horizon 96,
              direct where it can be, in this process: step time, peak GPU memory, the last training loss and the
              test MSE, both finite or the row fails.
  throughput  DLinear, PatchTST, iTransformer, Timer-XL and Autoformer (an encoder-decoder) at the settings of
              scripts/benchmark/throughput.py on ETTh1-shaped data: training windows/s of our loop over an epoch
              and of the model-only limit (one pre-built batch), the better of --rounds rounds, and on CUDA the
              host-device synchronisations per step of our loop; with --tslib, TSLib's run.py for two epochs of the
              models it has, same settings and data, its own "cost time" of the second.
  fsdp        a 100M-parameter Timer-XL (--tiny: a small one), one rank under torchrun: plain, --fsdp, + --cpu_offload,
              + --activation_checkpointing, both (offload on CUDA only), 2 x --fsdp_steps steps: peak GPU memory, the
              parameters + optimizer state left on the GPU, seconds per step of the second half; each checkpoint then
              tested by a plain run.py, whose MSE must equal the sharded run's.
The data: an ETTh1-shaped CSV (17420 hourly rows, 7 channels; ETTh1's split), in a temporary folder with the runs
(each removed after its row). The rows go to --out after each configuration: a run stopped at its time limit leaves
what it measured. The goals of issue 49 are read off the table at the end. Numbers only, beyond that: a failed row
does not fail the command.
"""
import argparse
import collections
import contextlib
import csv
import gc
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import models  # noqa: E402
import run  # noqa: E402
from data_provider import synthetic  # noqa: E402
from exp.flags import hyperparameter_flags  # noqa: E402
from scripts import make_scripts  # noqa: E402
from scripts.benchmark import throughput  # noqa: E402
from scripts.benchmark.fsdp_memory import MODEL as TIMER_XL_100M  # noqa: E402
from scripts.benchmark.launch import peak_rss  # noqa: E402
from scripts.sweep import torchrun_command  # noqa: E402
from utils import cli  # noqa: E402
from utils.errors import ConfigError  # noqa: E402
from utils.provenance import provenance  # noqa: E402

PARTS = ("models", "throughput", "fsdp")
PRECISIONS = {"fp32": [], "fp16": ["--use_amp", "--amp_dtype", "fp16"], "bf16": ["--use_amp", "--amp_dtype", "bf16"],
              "compile": ["--compile"]}
COMPILED = "dlinear,patchtst,timer_xl"
# run first, after the compiled ones, as the likeliest to fail on CUDA: an LSTM in fp16 (cuDNN's, not the CPU's), a
# recurrence in its own bf16, FFTs and convolutions fed by half-precision layers
RISKY = ("deepar", "tirex", "fedformer", "film", "timesnet", "koopa", "amplifier", "micn", "segrnn")
THROUGHPUT = ("dlinear", "patchtst", "itransformer", "timer_xl", "autoformer")
TSLIB_NAMES = {"dlinear": "DLinear", "patchtst": "PatchTST", "itransformer": "iTransformer", "autoformer": "Autoformer"}
# configuration: (model, flags); PatchTST for a model with buffers (BatchNorm's statistics), which stay on the GPU
# while --cpu_offload moves the shards to the host
FSDP = {"plain": ("timer_xl", []), "fsdp": ("timer_xl", ["--fsdp"]),
        "fsdp_offload": ("timer_xl", ["--fsdp", "--cpu_offload"]),
        "fsdp_ac": ("timer_xl", ["--fsdp", "--activation_checkpointing"]),
        "fsdp_offload_ac": ("timer_xl", ["--fsdp", "--cpu_offload", "--activation_checkpointing"]),
        "patchtst_fsdp": ("patchtst", ["--fsdp"]), "patchtst_fsdp_offload": ("patchtst", ["--fsdp", "--cpu_offload"])}
PATCHTST_SMALL = ["--seq_len", "96", "--output_token_len", "96", "--nonautoregressive", "--d_model", "64", "--d_ff",
                  "128", "--e_layers", "2", "--n_heads", "4", "--patch_len", "16", "--stride", "8"]
SYNC_STEPS = 60  # throughput: the steps over which our loop's synchronisations and host time are counted
HOST_EXTRA_TOP = 8  # throughput: the operations listed where our loop spends more host time than the limit
SUBPROCESS_SECONDS = 300  # a run.py or TSLib process that takes longer is stopped: a hang must not eat the lease
TINY = {"throughput": ["--d_model", "16", "--d_ff", "32", "--e_layers", "1", "--d_layers", "1", "--n_heads", "2",
                       "--seq_len", "96", "--input_token_len", "48"],
        "fsdp": ["--d_model", "32", "--d_ff", "64", "--e_layers", "2", "--n_heads", "2", "--seq_len", "192",
                 "--input_token_len", "96", "--output_token_len", "96"]}
ETTH1_ROWS, ETTH1_CHANNELS = 17420, 7
TSLIB_RUN = os.path.join(HERE, "scripts", "benchmark", "tslib_run.py")


def etth1_shaped(folder: str) -> str:
    """A generated CSV of ETTh1's length and width, as <folder>/ETT-small/ETTh1.csv (so --data ETTh1 splits it as
    ETTh1): the folder of the data root."""
    path = os.path.join(folder, "ETT-small", "ETTh1.csv")
    if not os.path.isfile(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        synthetic.write_csv(synthetic.generate(length=ETTH1_ROWS, n_covariates=ETTH1_CHANNELS - 1, seed=0), path)
    return folder


class Report:
    """The rows measured so far, written to DIR/gpu_check.json and DIR/gpu_check.md after each one. Each row keeps the
    commit that measured it (an --append run may be of later code); `planned`: the names each part means to measure
    (part or "compile_models" -> names), so that a goal with rows still missing reads incomplete, not met."""

    def __init__(self, folder: str, machine: dict, planned: dict, append: bool = False):
        self.folder, self.machine, self.planned = folder, machine, planned
        self.rows = {part: [] for part in PARTS}
        self.last = time.perf_counter()
        if append:
            self.reload()

    def reload(self) -> None:
        """The rows a run before (or a process this one started) wrote, if any, and what it planned besides."""
        path = os.path.join(self.folder, "gpu_check.json")
        if os.path.isfile(path):
            with open(path) as f:
                found = json.load(f)
            earlier = found["machine"]["commit"]
            self.rows = {part: [{**row, "commit": row.get("commit", earlier)} for row in found.get(part, [])]
                         for part in PARTS}
            before = found.get("planned", {})
            self.planned = {key: list(dict.fromkeys([*before.get(key, []), *self.planned.get(key, [])]))
                            for key in {*before, *self.planned}}

    def done(self, part: str, **key) -> bool:
        return any(all(row.get(k) == v for k, v in key.items()) for row in self.rows[part])

    def add(self, part: str, row: dict) -> None:
        now = time.perf_counter()
        row["seconds"], self.last = now - self.last, now  # the configuration's wall time, start-up included
        logline = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
                           if k != "detail")
        print(f"[{part}] {logline}", flush=True)
        self.rows[part].append({**row, "commit": self.machine["commit"]})
        # whole files or none: a lease's time limit may stop this process in the middle of a write
        write_atomically(os.path.join(self.folder, "gpu_check.json"),
                         json.dumps({"machine": self.machine, "planned": self.planned, **self.rows,
                                     "goals": goals(self.rows, self.planned)}, indent=1))
        write_atomically(os.path.join(self.folder, "gpu_check.md"), markdown(self.machine, self.rows, self.planned))


def write_atomically(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def machine_facts(device: torch.device, commit: str | None) -> dict:
    """What the check ran on and with what code (utils/provenance.py's record; --commit where no .git travelled)."""
    found = provenance()
    if commit is None:
        commit = (found["git_commit"] or "unknown")[:7] + ("+changes" if found["git_dirty"] else "")
    return {"device": found["device"], "device_type": device.type, "torch": found["torch"], "cuda": torch.version.cuda,
            "commit": commit, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def failure(e: BaseException) -> str:
    """One line for a failed configuration: a missing optional package is a skip, not a failure of the model."""
    lines = str(e).strip().splitlines()
    line = lines[0] if lines else ""
    if "needs the package" in line:
        return "skipped: " + line[line.index("needs the package"):].split(":")[0]
    return f"{type(e).__name__}: {line}"[:300]


def details(log: str = "") -> str:
    """What the JSON keeps of a failure for the one run a lease allows: the traceback's end and the log's."""
    return (traceback.format_exc()[-3000:] + ("\n--- log ---\n" + log[-3000:] if log else "")).strip()


def failed(status: str) -> bool:
    return status != "ok" and not status.startswith("skipped")


def cuda_alive(device: torch.device) -> bool:
    """False once an error (a device-side assert, an illegal address) has broken this process's CUDA context: every
    later kernel would fail with it."""
    try:
        return torch.ones(1, device=device).add_(1).item() == 2
    except Exception:  # noqa: BLE001
        return False


def reset_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


@contextlib.contextmanager
def run_folder(work: str):
    """A configuration's checkpoints and results, removed after its row: a hundred runs of models of up to 200M
    parameters would otherwise fill the disk."""
    folder = tempfile.mkdtemp(dir=work)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def peak_gpu_mb(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2 ** 20 if device.type == "cuda" else None


# ---- part 1: every model, every precision --------------------------------------------------------------------
def script_sizes(name: str) -> dict:
    """The model's own hyper-parameters as its ETTh1 script sets them at horizon 96 (scripts/make_scripts.py), the
    sizes users train; {} (its defaults) where it has no such script. Defaults can be far larger: at TimesNet's (d_model
    512, d_ff 2048; the script's 16 and 32) its fp32 and fp16 rows took 18 GB and 75 and 88 s on an H200."""
    found = make_scripts.MODELS[name]("ETTh1") if name in make_scripts.MODELS else None
    if found is None:
        return {}
    flags, _ = found
    own = models.hyperparameters(name)
    return {key: value[96] if isinstance(value, dict) else value for key, value in flags.items() if key in own}


def model_run_flags(name: str, a, data_root: str, folder: str) -> list:
    caps = models.capabilities(name)
    sizes = hyperparameter_flags(models.tiny_hyperparameters(name) if a.tiny else script_sizes(name))
    lengths = ["--seq_len", "48", "--input_token_len", "16", "--output_token_len", "16", "--label_len", "16"] \
        if a.tiny else ["--seq_len", "192", "--input_token_len", "96", "--output_token_len", "96", "--label_len", "48"]
    return ["--model", name, "--data", "ETTh1", "--root_path", os.path.join(data_root, "ETT-small"), *lengths,
            *(["--nonautoregressive"] if caps.direct else []), "--batch_size", str(a.batch_size),
            "--train_steps", str(2 * a.steps), "--val_every", str(a.steps), "--patience", "9", "--lradj", "constant",
            *(x for flag in ("--val_windows", "--val_windows_end", "--test_windows") for x in (flag, str(a.windows))),
            "--device", a.device,
            "--checkpoints", os.path.join(folder, "checkpoints"), "--results_dir", os.path.join(folder, "results"),
            *sizes]


def check_model(name: str, precision: str, a, data_root: str, folder: str) -> dict:
    device = torch.device(a.device)
    row = {"model": name, "precision": precision}
    reset_memory(device)
    log = io.StringIO()
    try:
        with contextlib.redirect_stderr(log):
            (result,) = run.main(model_run_flags(name, a, data_root, folder) + PRECISIONS[precision]
                                 + ["--des", precision])
        history, metrics = result["history"], result["metrics"]
        row.update(step_ms=history[-1]["train_seconds"] / a.steps * 1e3, peak_gpu_mb=peak_gpu_mb(device),
                   train_loss=history[-1]["train_loss"], test_mse=metrics["mse"])
        finite = math.isfinite(row["train_loss"]) and math.isfinite(row["test_mse"])
        row["status"] = "ok" if finite else "non-finite"
    except (Exception, SystemExit) as e:  # noqa: BLE001 - every failure is a finding; the check goes on
        row["status"] = failure(e)
        if failed(row["status"]):
            row["detail"] = details(log.getvalue())
    return row


def model_order(names: list, compiled: list) -> list:
    """The compiled models, then the riskiest, then the rest as given: a time limit cuts the safest last."""
    return sorted(names, key=lambda n: (n not in compiled, n not in RISKY))


def models_part(report: Report, a, data_root: str, work: str) -> None:
    order = model_order(a.models, a.compile_models)
    for i, name in enumerate(order):
        for precision in (*a.precisions, *(["compile"] if name in a.compile_models else [])):
            if report.done("models", model=name, precision=precision):
                continue  # --append: measured by an earlier run
            with run_folder(work) as folder:
                row = check_model(name, precision, a, data_root, folder)
            report.add("models", row)
            if a.device == "cuda" and failed(row["status"]) and not cuda_alive(torch.device(a.device)):
                continue_elsewhere(report, a, order[i:])
                return


def continue_elsewhere(report: Report, a, names: list) -> None:
    """The rest of the models part in a fresh process, which appends to the same report: this one's CUDA context is
    broken, and would fail every later row with the error of the one that broke it."""
    print(f"the CUDA context is broken; the remaining {len(names)} models go on in a new process", flush=True)
    cmd = [sys.executable, "-m", "scripts.benchmark.gpu_check", "--out", a.out, "--device", a.device, "--parts",
           "models", "--models", ",".join(names), "--precisions", ",".join(a.precisions), "--compile_models",
           ",".join(m for m in a.compile_models if m in names), "--steps", str(a.steps), "--batch_size",
           str(a.batch_size), "--windows", str(a.windows), "--commit", report.machine["commit"], "--append",
           *(["--tiny"] if a.tiny else [])]
    subprocess.run(cmd, cwd=HERE)
    report.reload()


# ---- part 2: throughput ------------------------------------------------------------------------------------
def tslib_command(name: str, data_root: str, device: torch.device, python: str = sys.executable) -> list:
    """TSLib's run.py (through tslib_run.py, in its checkout) training `name` two epochs at throughput.py's settings
    on <data_root>/ETT-small/ETTh1.csv, on the GPU unless device is the CPU."""
    ours = throughput.MODELS[name]
    settings = {flag: value for flag, value in zip(ours, ours[1:])
                if flag.startswith("--") and not value.startswith("--")}
    shared = ("--learning_rate", "--d_model", "--d_ff", "--e_layers", "--d_layers", "--n_heads", "--factor",
              "--dropout", "--label_len", "--seq_len")
    common = dict(zip(throughput.COMMON[::2], throughput.COMMON[1::2]))
    flags = {"--task_name": "long_term_forecast", "--is_training": "1", "--model_id": f"gpu_check_{name}",
             "--model": TSLIB_NAMES[name], "--data": "ETTh1", "--root_path": os.path.join(data_root, "ETT-small") + "/",
             "--data_path": "ETTh1.csv", "--features": "M", "--seq_len": common["--seq_len"], "--label_len": "48",
             "--pred_len": common["--output_token_len"], "--enc_in": str(ETTH1_CHANNELS),
             "--dec_in": str(ETTH1_CHANNELS), "--c_out": str(ETTH1_CHANNELS), "--batch_size": common["--batch_size"],
             "--train_epochs": "2", "--patience": "2", "--itr": "1", "--des": "gpu_check",
             **{k: v for k, v in settings.items() if k in shared}}
    return [python, "-u", TSLIB_RUN, *(x for kv in flags.items() for x in kv),
            *(["--gpu", "0"] if device.type == "cuda" else ["--no_use_gpu"])]


def tslib_epoch_seconds(output: str) -> float:
    """TSLib's own timing of its second training epoch ("Epoch: 2 cost time: 12.3"): the first also starts CUDA, its
    kernels and the loader's workers, which ours is measured after."""
    found = re.search(r"Epoch: 2 cost time: ([\d.]+)", output)
    if not found:
        raise RuntimeError(cli.error_line(output, "TSLib printed no epoch time"))
    return float(found.group(1))


def tslib_windows_per_second(name: str, a, data_root: str, windows: int) -> float:
    """TSLib's training windows/s in a copy of the checkout (it writes checkpoints and results where it runs)."""
    with tempfile.TemporaryDirectory() as work:
        shutil.copytree(a.tslib, work, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git", "dataset"))
        output = bounded(tslib_command(name, data_root, torch.device(a.device), a.tslib_python), work)[1]
    return windows / tslib_epoch_seconds(output)


def bounded(cmd: list, cwd: str, env: dict | None = None) -> tuple:
    """(exit code, stdout + stderr) of a command stopped, with every process it started, after SUBPROCESS_SECONDS."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=SUBPROCESS_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise RuntimeError(f"stopped after {SUBPROCESS_SECONDS} s: {cli.error_line(output, output[-300:])}") from None
    return proc.returncode, output


def syncs_per_step(exp, steps: int) -> float:
    """Host-device synchronisations per training step of our loop, as torch's sync debug mode reports them: each one
    empties the GPU's queue of work, and an overhead-bound model's GPU then waits while the host launches the next."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            throughput.ours(exp, steps)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught) / (steps + throughput.WARMUP_STEPS)  # its warm-up too


def host_self_us(fn, device: torch.device, steps: int) -> collections.Counter:
    """The host's own time per step in each operation of fn (on a GPU the CUDA runtime's calls too: launches,
    event records, copies), microseconds: where an overhead-bound step's time goes."""
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA]
                                                          if device.type == "cuda" else [])
    with torch.profiler.profile(activities=activities) as prof:
        fn()
    return collections.Counter({e.key: e.self_cpu_time_total / steps for e in prof.key_averages()})


def host_extra_us(exp, steps: int, top: int = HOST_EXTRA_TOP) -> dict:
    """The operations on which our loop spends the most more host time per step than the model-only limit (each
    measurement's warm-up and set-up counted in both), microseconds, largest first."""
    n_steps = steps + throughput.WARMUP_STEPS
    ours = host_self_us(lambda: throughput.ours(exp, steps), exp.env.device, n_steps)
    limit = host_self_us(lambda: throughput.model_only(exp, steps), exp.env.device, n_steps)
    ours.subtract(limit)
    return {key: round(us, 1) for key, us in ours.most_common(top) if us > 0}


def measure_throughput(name: str, a, data_root: str) -> dict:
    device = torch.device(a.device)
    row = {"model": name}
    reset_memory(device)
    try:
        exp, args = throughput.make_exp(name, data_root, device, TINY["throughput"] if a.tiny else ())
        loader = throughput.limited(exp.trainer.loader, a.throughput_steps)
        windows, n_steps = len(loader.order), -(-len(loader.order) // args.batch_size)
        rounds = throughput.rounds_of(a.rounds, lambda: throughput.ours(exp, a.throughput_steps)[0],
                                      lambda: throughput.model_only(exp, n_steps))
        ours_s, limit_s = throughput.minima(rounds)
        # the ratio of the fastest rounds (the goal's), and the median of each round's own ratio with its 95%
        # interval: how far a host's slow spells move it
        row.update(windows=windows, ours_windows_s=windows / ours_s, limit_windows_s=windows / limit_s,
                   ours_over_limit=ours_s / limit_s, ours_over_limit_median=throughput.median_ratio(rounds, 0, 1),
                   ours_over_limit_interval=[float(r) for r in throughput.median_ratio_interval(rounds, 0, 1)],
                   peak_gpu_mb=peak_gpu_mb(device))
        row["host_extra_us"] = host_extra_us(exp, a.throughput_steps or SYNC_STEPS)
        if device.type == "cuda":
            row["syncs_per_step"] = syncs_per_step(exp, a.throughput_steps or SYNC_STEPS)
        if a.tslib and name in TSLIB_NAMES:
            if a.throughput_steps is not None:  # TSLib trains a whole epoch
                ours_s, _ = throughput.ours(exp, None)
            row["ours_epoch_windows_s"] = len(exp.trainer.loader.order) / ours_s
            # TSLib's loader keeps the last, incomplete batch: every training window
            row["tslib_windows_s"] = tslib_windows_per_second(name, a, data_root, len(exp.data.datasets["train"]))
            row["ours_over_tslib"] = row["ours_epoch_windows_s"] / row["tslib_windows_s"]
        row["status"] = "ok"
    except (Exception, SystemExit) as e:  # noqa: BLE001
        row["status"] = failure(e)
        row["detail"] = details()
    return row


def throughput_part(report: Report, a, data_root: str) -> None:
    for name in THROUGHPUT:
        report.add("throughput", measure_throughput(name, a, data_root))


# ---- part 3: FSDP ------------------------------------------------------------------------------------------
def fsdp_flags(a, data_root: str, folder: str, config: str) -> list:
    model, _ = FSDP[config]
    sizes = PATCHTST_SMALL if model == "patchtst" else TINY["fsdp"] if a.tiny else TIMER_XL_100M
    return ["--model", model, *sizes, "--data", "ETTh1", "--root_path", os.path.join(data_root, "ETT-small"),
            "--batch_size", "8", "--lradj", "constant", "--dist_timeout", "3",
            "--val_windows", "8", "--val_windows_end", "8", "--test_windows", "64", "--des", config,
            "--device", a.device, "--checkpoints", os.path.join(folder, "fsdp_checkpoints"),
            "--results_dir", os.path.join(folder, "fsdp_results")]


def launched(cmd: list) -> str:
    """A run.py process's log; its failure raises with its error line (the log's end kept in the row's detail).

    Every core for its threads: under --cpu_offload the optimizer steps on the host, and one thread would time that
    instead of the offload."""
    code, log = bounded(cmd, HERE, {**os.environ, "OMP_NUM_THREADS": str(os.cpu_count() or 1)})
    if code:
        raise LaunchError(cli.error_line(log, f"exit code {code}"), log)
    return log


class LaunchError(RuntimeError):
    def __init__(self, line: str, log: str):
        super().__init__(line)
        self.log = log


def logged(pattern: str, log: str, convert=float):
    found = re.search(pattern, log)
    return convert(found.group(1)) if found else None


def test_mse(log: str) -> float:
    return logged(r"test \(\d+ windows, horizon \d+\): mse ([-\d.e+]+)", log)


def measure_fsdp(config: str, a, data_root: str, folder: str) -> dict:
    model, sharding = FSDP[config]
    row = {"configuration": config, "model": model}
    if "--cpu_offload" in sharding and a.device != "cuda":
        row["status"] = "skipped: --cpu_offload needs CUDA"
        return row
    try:
        flags = fsdp_flags(a, data_root, folder, config)
        log = launched(torchrun_command(1, [os.path.join(HERE, "run.py"), "--ddp", *sharding, *flags,
                                            "--train_steps", str(2 * a.fsdp_steps), "--val_every", str(a.fsdp_steps)]))
        run_folder = os.path.basename(os.path.dirname(logged(r"\| checkpoint (\S+)", log, str)))
        with open(os.path.join(folder, "fsdp_results", run_folder, "history.csv")) as f:
            second_half = list(csv.DictReader(f))[-1]
        row.update(parameters=logged(r"(\d+) parameters, \d+ trainable", log, int),
                   peak_rss_mb=float(peak_rss(log)), s_per_step=float(second_half["train_seconds"]) / a.fsdp_steps,
                   state_mb=logged(r"parameters \+ optimizer state per rank: ([\d.]+) MB", log),
                   peak_gpu_mb=logged(r"peak GPU memory per rank: ([\d.]+) MB", log),
                   state_on_gpu_mb=logged(r"parameters \+ optimizer state on the GPU per rank: ([\d.]+) MB", log),
                   test_mse=test_mse(log))
        row["status"] = "ok"
        if "--fsdp" in sharding:  # the sharded checkpoint, tested by a plain run
            plain = launched([sys.executable, os.path.join(HERE, "run.py"), *flags, "--is_training", "0",
                              "--test_dir", run_folder])
            row["plain_test_mse"] = test_mse(plain)
            if not math.isclose(row["plain_test_mse"], row["test_mse"], rel_tol=1e-4):
                row["status"] = "the plain run's test differs"
    except (Exception, SystemExit) as e:  # noqa: BLE001
        row["status"] = failure(e)
        row["detail"] = details(getattr(e, "log", ""))
    return row


def fsdp_part(report: Report, a, data_root: str, work: str) -> None:
    for config in FSDP:
        with run_folder(work) as folder:
            report.add("fsdp", measure_fsdp(config, a, data_root, folder))


# ---- the goals, the table ------------------------------------------------------------------------------------
def number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def verdict(met: bool, planned: list, measured: set, what: str) -> str:
    """met / NOT met over the rows measured; a goal met so far whose planned rows are not all there is incomplete."""
    missing = [name for name in planned if name not in measured]
    if not met:
        return "NOT met"
    if missing:
        return f"incomplete: {len(missing)} of {len(planned)} {what} not measured ({', '.join(missing)})"
    return "met"


def goals(rows: dict, planned: dict | None = None) -> dict:
    """Issue 49's goals read off the rows measured: met, NOT met, or incomplete where rows of `planned` (part or
    "compile_models" -> names) are missing; absent where nothing measured them. A row skipped for a package the
    machine lacks counts for neither."""
    planned, found = planned or {}, {}
    model_rows = [r for r in rows["models"] if not r["status"].startswith("skipped")]
    skipped = {r["model"] for r in rows["models"] if r["status"].startswith("skipped")}
    amp = [r for r in model_rows if r["precision"] in ("fp16", "bf16")]
    if amp:
        wanted = {p for p in planned.get("precisions", ("fp16", "bf16")) if p in ("fp16", "bf16")}
        every = {m for m in {r["model"] for r in amp} if wanted <= {r["precision"] for r in amp if r["model"] == m}}
        found["amp_every_model_finite"] = verdict(all(r["status"] == "ok" for r in amp), planned.get("models", []),
                                                  every | skipped, "models")
    eager = {r["model"]: r.get("step_ms") for r in model_rows if r["precision"] == "fp32"}
    compiled = [r for r in model_rows if r["precision"] == "compile"]
    if compiled:
        faster = all(number(eager.get(r["model"])) and number(r.get("step_ms")) and r["step_ms"] <= eager[r["model"]]
                     for r in compiled)
        found["compile_never_slower"] = verdict(faster, planned.get("compile_models", []),
                                                {r["model"] for r in compiled} | skipped, "compiled models")
    speed = [r for r in rows["throughput"] if r["status"] == "ok" and number(r.get("ours_over_limit"))]
    if speed:
        measured = {r["model"] for r in speed}
        found["within_10pct_of_limit"] = verdict(all(r["ours_over_limit"] <= 1.10 for r in speed),
                                                 planned.get("throughput", []), measured, "models")
        versus = [r["ours_over_tslib"] for r in speed
                  if r["model"] in ("dlinear", "patchtst") and number(r.get("ours_over_tslib"))]
        if versus:
            found["2x_tslib_dlinear_patchtst"] = verdict(all(v >= 2 for v in versus), [], measured, "models")
    state = {r["configuration"]: r.get("state_on_gpu_mb") for r in rows["fsdp"] if r["status"] == "ok"}
    if number(state.get("plain")) and number(state.get("fsdp_offload")):
        found["offload_state_on_gpu_le_20pct"] = verdict(state["fsdp_offload"] <= 0.2 * state["plain"], [], set(), "")
    return found


def cell(value) -> str:
    if value is None:
        return "—"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def table(rows: list, columns: list) -> list:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)] + \
        ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]


def markdown(machine: dict, rows: dict, planned: dict | None = None) -> str:
    commits = collections.Counter(row["commit"] for part in PARTS for row in rows[part] if "commit" in row)
    code = "commits " + ", ".join(f"{c} ({n} rows)" for c, n in commits.items()) if len(commits) > 1 else \
        f"commit {next(iter(commits), machine['commit'])}"
    by = ["commit"] if len(commits) > 1 else []
    lines = [f"# GPU check: {machine['device']}", "", f"torch {machine['torch']} (CUDA {machine['cuda']}), {code}, "
             f"{machine['date']}", ""]
    if rows["models"]:
        lines += ["## Every model: one short run per precision", ""]
        lines += table(rows["models"], ["model", "precision", "step_ms", "peak_gpu_mb", "train_loss", "test_mse",
                                        "seconds", "status", *by]) + [""]
    if rows["throughput"]:
        lines += ["## Training throughput (windows/s)", ""]
        lines += table(rows["throughput"], ["model", "ours_windows_s", "limit_windows_s", "ours_over_limit",
                                            "ours_over_limit_median", "tslib_windows_s", "ours_over_tslib",
                                            "syncs_per_step", "peak_gpu_mb", "seconds", "status", *by]) + [""]
        extra = [row for row in rows["throughput"] if row.get("host_extra_us")]
        if extra:
            lines += ["Host time our loop adds per step, by operation (µs, ours minus the limit):", ""]
            lines += [f"- {row['model']}: " + ", ".join(f"{op} {us:g}" for op, us in row["host_extra_us"].items())
                      for row in extra] + [""]
    if rows["fsdp"]:
        lines += ["## FSDP, one rank", ""]
        lines += table(rows["fsdp"], ["configuration", "model", "parameters", "peak_gpu_mb", "state_on_gpu_mb",
                                      "state_mb", "s_per_step", "test_mse", "plain_test_mse", "seconds",
                                      "status", *by]) + [""]
    lines += ["## Goals", ""] + [f"- {goal}: {state}" for goal, state in goals(rows, planned).items()]
    return "\n".join(lines) + "\n"


def parse(argv=None) -> argparse.Namespace:
    """The command line, checked: a user error raises ConfigError (one line)."""
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for gpu_check.json and gpu_check.md (the runs and data go to "
                                                "a temporary folder, removed at the end)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--tiny", action="store_true", help="every model at its contract-test size (a check of the script)")
    p.add_argument("--parts", type=lambda s: s.split(","), default=list(PARTS), help=f"some of {','.join(PARTS)}")
    p.add_argument("--models", type=lambda s: s.split(","), default=list(models.NAMES),
                   help="the models part's models (default: every registered model)")
    p.add_argument("--precisions", type=lambda s: s.split(","), default=["fp32", "fp16", "bf16"],
                   help="models: the precisions every model trains in (default fp32,fp16,bf16)")
    p.add_argument("--compile_models", type=lambda s: [m for m in s.split(",") if m], default=COMPILED.split(","),
                   help=f"also trained under --compile (default {COMPILED}; '' for none)")
    p.add_argument("--steps", type=cli.at_least(1), default=10, help="models: steps per half of a run")
    p.add_argument("--batch_size", type=cli.at_least(1), default=32, help="models: windows per step")
    p.add_argument("--windows", type=cli.at_least(1), default=64, help="models: validation and test windows")
    p.add_argument("--throughput_steps", type=cli.at_least(1), default=None,
                   help="throughput: steps per measurement (default: an epoch)")
    p.add_argument("--rounds", type=cli.at_least(1), default=3, help="throughput: rounds, the best one kept")
    p.add_argument("--fsdp_steps", type=cli.at_least(1), default=4, help="fsdp: optimizer steps per run")
    p.add_argument("--tslib", type=cli.existing_folder, help="a Time-Series-Library checkout: its loop's throughput")
    p.add_argument("--tslib_python", default=sys.executable, help="the Python with TSLib's requirements")
    p.add_argument("--commit", default=None, help="the commit tested (default: git's HEAD here)")
    p.add_argument("--append", action="store_true",
                   help="keep the rows of --out's gpu_check.json and run only the models' configurations not in it "
                        "(the rest of a run a time limit cut off)")
    a = p.parse_args(argv)
    for part in a.parts:
        if part not in PARTS:
            raise ConfigError(f"--parts {part}: the parts are {', '.join(PARTS)}")
    for precision in a.precisions:
        if precision not in ("fp32", "fp16", "bf16"):
            raise ConfigError(f"--precisions {precision}: the precisions are fp32, fp16, bf16")
    for name in (*a.models, *a.compile_models):
        if name not in models.NAMES:
            raise ConfigError(f"--models/--compile_models {name}: unknown model; available: {', '.join(models.NAMES)}")
    if a.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no GPU is visible to torch (use --device cpu --tiny to check the script)")
    return a


def main(argv=None) -> None:
    a = parse(argv)
    os.makedirs(a.out, exist_ok=True)
    folder = os.path.abspath(a.out)
    planned = {"models": a.models if "models" in a.parts else [], "precisions": a.precisions,
               "compile_models": [m for m in a.compile_models if m in a.models] if "models" in a.parts else [],
               "throughput": list(THROUGHPUT) if "throughput" in a.parts else []}
    report = Report(folder, machine_facts(torch.device(a.device), a.commit), planned, a.append)
    print(f"GPU check on {report.machine['device']}, torch {torch.__version__}, commit {report.machine['commit']}",
          flush=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as work:
        data_root = etth1_shaped(os.path.join(work, "data"))
        # the goals that need a GPU most first: a lease's time limit cuts off the longest part, the last
        if "throughput" in a.parts:
            throughput_part(report, a, data_root)
        if "fsdp" in a.parts:
            fsdp_part(report, a, data_root, work)
        if "models" in a.parts:
            models_part(report, a, data_root, work)
    print(markdown(report.machine, report.rows, report.planned))
    print(f"{time.perf_counter() - start:.0f} s; written to {folder}/gpu_check.json and gpu_check.md")


if __name__ == "__main__":
    cli.run(main)
