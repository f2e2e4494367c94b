"""Training-throughput benchmark: our pipeline against the model-only limit and a field-standard pipeline.

    python scripts/benchmark/throughput.py --data_root ../shared/datasets            # CPU or the GPU
    python scripts/benchmark/throughput.py --data_root ../shared/datasets --quick    # fewer steps

For DLinear, SparseTSF, Amplifier (overhead-bound), PatchTST, SOFTS and Autoformer (an encoder-decoder reading the
calendar of window and horizon) on ETTh1 (lookback 96 -> 96, batch 32, one process; PatchTST with d_model 512, d_ff
2048, 1 layer, 2 heads, patch 16 / stride 8; Autoformer as TSLib's ETTh1 script) it prints: train windows/s, seconds per
epoch, validation + test seconds, peak RSS (and peak GPU memory), the share of step time spent
outside forward/backward/optimizer, the same steps on one fixed pre-built batch (model-only limit),
a field-standard pipeline (per-sample __getitem__ + default collate + per-batch .float().to()),
achieved matmul FLOP/s against the measured fp32 peak (PatchTST), the DDP code path at world size 1
and 2, and the speed of --use_amp and --compile. Numbers only; nothing here is asserted.
"""
import argparse
import contextlib
import csv
import glob
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.flop_counter import FlopCounterMode

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import models  # noqa: E402
from data_provider.factory import build_data  # noqa: E402
from data_provider.windows import WindowLoader  # noqa: E402
from exp.experiment import Experiment  # noqa: E402
from exp.config import parse_args, resolve  # noqa: E402
from exp.identity import plan_runs  # noqa: E402
from exp.trainer import TrainingSteps  # noqa: E402
from models.contract import model_inputs  # noqa: E402
from run import build_model  # noqa: E402
from utils.dist import DistEnv  # noqa: E402
from utils import cli  # noqa: E402
from utils.process import prepare_training_process  # noqa: E402
from utils.schedules import ScheduleContext, build_scheduler  # noqa: E402

COMMON = ["--data", "ETTh1", "--seq_len", "96", "--output_token_len", "96", "--batch_size", "32",
          "--nonautoregressive", "--train_epochs", "1", "--lradj", "constant"]
MODELS = {
    "dlinear": ["--model", "dlinear", "--learning_rate", "0.005"],
    "patchtst": ["--model", "patchtst", "--d_model", "512", "--d_ff", "2048", "--e_layers", "1", "--n_heads", "2",
                 "--patch_len", "16", "--stride", "8", "--dropout", "0.1", "--use_norm"],
    "sparsetsf": ["--model", "sparsetsf", "--period_len", "24", "--learning_rate", "0.02"],
    "autoformer": ["--model", "autoformer", "--d_model", "512", "--d_ff", "2048", "--e_layers", "2", "--d_layers", "1",
                   "--n_heads", "8", "--label_len", "48", "--factor", "3", "--dropout", "0.1"],
    # two of issue 48's models at their official ETTh1 horizon-96 settings: Amplifier's small MLPs are overhead-bound,
    # SOFTS's series tokens of width 256 compute-bound
    "amplifier": ["--model", "amplifier", "--hidden_size", "64", "--learning_rate", "0.02"],
    "softs": ["--model", "softs", "--d_model", "256", "--d_core", "256", "--d_ff", "256", "--e_layers", "1",
              "--use_norm", "--learning_rate", "0.0003"],
    # measured by gpu_check.py only (issue 49): their ETTh1 scripts' settings, Timer-XL's lookback 672 in one shot
    "itransformer": ["--model", "itransformer", "--e_layers", "2", "--d_model", "256", "--d_ff", "256", "--n_heads",
                     "8", "--dropout", "0.1", "--activation", "gelu", "--use_norm"],
    "timer_xl": ["--model", "timer_xl", "--seq_len", "672", "--input_token_len", "96", "--e_layers", "1", "--d_model",
                 "1024", "--d_ff", "2048", "--n_heads", "8", "--dropout", "0.1", "--use_norm", "--attention_form",
                 "openltm"],
}
WARMUP_STEPS = 3  # each measurement's untimed steps first
MEASURED = ("dlinear", "patchtst", "sparsetsf", "autoformer", "amplifier", "softs")  # by this script, by default


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def matmul_peak(device: torch.device) -> float:
    """Best fp32 FLOP/s of large square matmuls."""
    best = 0.0
    for n in (1024, 2048, 4096):
        a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
        a @ b
        reps = 3 if device.type == "cpu" else 20
        seconds = timed(lambda: [a @ b for _ in range(reps)], device)
        best = max(best, 2 * n ** 3 * reps / seconds)
    return best


def make_exp(name: str, data_root: str, device: torch.device, extra=(), ddp: bool = False):
    return exp_of(COMMON + MODELS[name] + ["--root_path", os.path.join(data_root, "ETT-small"), *extra], device, ddp)


def exp_of(argv: list, device: torch.device, ddp: bool = False):
    """(the Experiment of run.py flags `argv`, in this process, its outputs in a temporary folder; its args)."""
    out = tempfile.mkdtemp()
    args = resolve(parse_args([*argv, "--results_dir", out, "--checkpoints", os.path.join(out, "ckpt")]))
    env = DistEnv(0, 0, 1, device, "nccl" if device.type == "cuda" else "gloo", ddp)
    torch.manual_seed(0)
    data = build_data(args, device, True, models.capabilities(args.model).time_marks)
    (plan,) = plan_runs(args, data, env.world_size)
    return Experiment(args, env, data, build_model(args, data), plan), args


def limited(loader: WindowLoader, steps: int | None) -> WindowLoader:
    """The loader's epoch order, cut to its first `steps` batches."""
    if steps is None:
        return loader
    return WindowLoader(loader.dataset, loader.batch_size, loader.indices()[:steps * loader.batch_size])


def train_pass(exp: Experiment, loader: WindowLoader, optimizer, scheduler) -> None:
    """One pass over `loader` through the training loop's own steps (Trainer._train_steps: forward, loss,
    backward, optimizer, scheduler, the loss kept on the device), with no validation or checkpoint in it."""
    trainer, never = exp.trainer, 2 ** 62  # no row ends and no checkpoint falls inside the pass
    trainer.steps = TrainingSteps(len(loader), never, never, never, False)
    epoch_loader, trainer.loader = trainer.loader, loader
    trainer.state.optimizer, trainer.state.scheduler = optimizer, scheduler
    try:
        trainer._train_steps(trainer._micro_batches(0), scheduler.steps + len(loader), None)
    finally:  # the next measurement cuts its steps from the whole epoch, not from this pass's
        trainer.loader = epoch_loader


def ours(exp: Experiment, steps: int | None) -> tuple:
    """(seconds, windows) of our training loop, after a warm-up pass of a few steps."""
    loader = limited(exp.trainer.loader, steps)
    optimizer = exp.trainer.build_optimizer()
    scheduler = build_scheduler(optimizer, "constant", ScheduleContext(len(loader), 1, 1.0, 0.2), 1.0, 0)
    train_pass(exp, limited(loader, WARMUP_STEPS), optimizer, scheduler)
    seconds = timed(lambda: train_pass(exp, loader, optimizer, scheduler), exp.env.device)
    return seconds, len(loader.order)


def rounds_of(repeats: int, *measurements) -> list:
    """`repeats` interleaved rounds of every measurement, so that a slow spell of a shared machine hits
    them alike; rounds[i][j] is measurement j of round i.

    Each round runs them in a fresh random order: in a fixed order each measurement would always start from
    the caches and heap the same other one left (ours always followed the field-standard pipeline).
    """
    rng = np.random.default_rng(0)
    rounds = []
    for _ in range(repeats):
        results = [0.0] * len(measurements)
        for j in rng.permutation(len(measurements)):
            results[j] = measurements[j]()
        rounds.append(results)
    return rounds


def minima(rounds: list) -> list:
    """Each measurement's minimum over the rounds."""
    return [min(column) for column in zip(*rounds)]


def paired_ratios(rounds: list, a: int, b: int) -> np.ndarray:
    """Measurement a / measurement b of the same round, per round."""
    return np.array([r[a] / r[b] for r in rounds])


def median_ratio(rounds: list, a: int, b: int) -> float:
    """Median over rounds of measurement a / measurement b of the same round."""
    return float(np.median(paired_ratios(rounds, a, b)))


def median_ratio_interval(rounds: list, a: int, b: int, level: float = 0.95) -> tuple:
    """Bootstrap interval of median_ratio: how uncertain a median of this many rounds is."""
    ratios = paired_ratios(rounds, a, b)
    medians = np.median(np.random.default_rng(0).choice(ratios, (2000, len(ratios))), axis=1)
    return tuple(np.quantile(medians, [(1 - level) / 2, (1 + level) / 2]))


def fetch_only(exp: Experiment, steps: int | None) -> float:
    """The loader alone; each batch is dropped before the next, as in training (holding all of them would
    time the page faults of an epoch's worth of fresh memory instead)."""
    loader = limited(exp.trainer.loader, steps)

    def drain():
        for _ in loader:
            pass

    return timed(drain, exp.env.device)


def train_steps(exp: Experiment, optimizer: torch.optim.Optimizer, batches) -> None:
    """Forward/backward/optimizer and nothing else: the same model, loss and fused Adam as ours.
    batches: (the forward's inputs, its keyword inputs, the target)."""
    model = exp.running.model
    for inputs, kwargs, y in batches:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(*inputs, **kwargs)[:, -y.shape[1]:], y).backward()
        optimizer.step()


def prebuilt(exp: Experiment) -> tuple:
    """One training batch as the forward's (inputs, keyword inputs, target), built once."""
    batch = next(iter(exp.trainer.loader))
    return (*model_inputs(exp.config, exp.forward.caps, batch.x, batch, 0), batch.y)


def model_only(exp: Experiment, n_steps: int) -> float:
    step = prebuilt(exp)
    optimizer = exp.trainer.build_optimizer()  # built outside the timing, as ours() builds its own
    train_steps(exp, optimizer, [step] * WARMUP_STEPS)
    return timed(lambda: train_steps(exp, optimizer, [step] * n_steps), exp.env.device)


class FieldStandardDataset(Dataset):
    """The common TSLib-style dataset: float64 arrays, one window sliced and converted per __getitem__."""

    def __init__(self, values: np.ndarray, marks: np.ndarray, seq_len: int, pred_len: int):
        self.values, self.marks, self.seq_len, self.pred_len = values, marks, seq_len, pred_len

    def __len__(self):
        return len(self.values) - self.seq_len - self.pred_len + 1

    def __getitem__(self, i):
        s, e = i, i + self.seq_len
        return self.values[s:e], self.values[e:e + self.pred_len], self.marks[s:e], self.marks[e:e + self.pred_len]


def field_standard(exp: Experiment, steps: int | None) -> float:
    ds = exp.data.datasets["train"]
    begin, end = ds.begin, ds.begin + ds.n_starts + ds.window_len - 1
    values = ds.series[begin:end].double().cpu().numpy()
    marks = np.zeros((len(values), exp.data.n_marks))
    c, device = exp.config, exp.env.device
    loader = DataLoader(FieldStandardDataset(values, marks, c.seq_len, c.output_token_len),
                        batch_size=c.batch_size, shuffle=True, num_workers=0)
    n = len(loader) if steps is None else steps
    optimizer = exp.trainer.build_optimizer()

    def run():
        batches = ((x.float().to(device), y.float().to(device), xm.float().to(device),
                    ym.float().to(device)) for (x, y, xm, ym), _ in zip(loader, range(n)))
        train_steps(exp, optimizer, (((x, field_marks(exp, xm, ym)), {}, y) for x, y, xm, ym in batches))

    return timed(run, device)


def field_marks(exp: Experiment, x_mark: torch.Tensor, y_mark: torch.Tensor) -> torch.Tensor | None:
    """The calendar features the model reads, as a TSLib-style loader hands them (window, then horizon)."""
    if not exp.data.n_marks:
        return None
    return torch.cat([x_mark, y_mark], dim=1) if exp.forward.caps.future_marks else x_mark


def step_flops(exp: Experiment) -> float:
    optimizer = exp.trainer.build_optimizer()
    with FlopCounterMode(display=False) as counter:
        train_steps(exp, optimizer, [prebuilt(exp)])
    return counter.get_total_flops()


def eval_seconds(exp: Experiment) -> float:
    model = exp.running.raw
    return timed(lambda: (exp.evaluator.mean_loss(model, "validation"), exp.evaluator.mean_loss(model, "test")),
                 exp.env.device)


def ddp_world_one_overhead(name: str, data_root: str, device: torch.device, steps: int | None,
                           repeats: int) -> tuple:
    """Our DDP code path at world size 1 (a real process group; Exp leaves out the DDP wrapper, which
    would have nothing to all-reduce) against the plain path: the median of `repeats` paired rounds of
    `steps` steps (None: an epoch) in this process, and its bootstrap interval, as time fractions over."""
    port = 29000 + os.getpid() % 1000
    torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo",
                                         init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        plain, _ = make_exp(name, data_root, device)
        ddp_path, _ = make_exp(name, data_root, device, ddp=True)
        rounds = rounds_of(repeats, lambda: ours(plain, steps)[0], lambda: ours(ddp_path, steps)[0])
    finally:
        torch.distributed.destroy_process_group()
    low, high = median_ratio_interval(rounds, 1, 0)
    return median_ratio(rounds, 1, 0) - 1, low - 1, high - 1


def run_cli(name: str, data_root: str, launcher: list, env_extra: dict, epochs: int) -> dict:
    """run.py in a fresh process: its own fastest epoch (train_seconds of history.csv), its peak RSS, and the
    process's wall time against the time its epochs took (the rest: start-up, the test and exit).

    The peak is VmHWM polled from /proc: the child's rusage would also count the memory of this process,
    which fork lends the child until exec.
    """
    out = tempfile.mkdtemp()
    cmd = [*launcher, os.path.join(REPO, "run.py"), *(["--ddp"] if len(launcher) > 1 else []), *COMMON,
           *MODELS[name], "--root_path", os.path.join(data_root, "ETT-small"), "--results_dir", out,
           "--checkpoints", os.path.join(out, "ckpt"), "--train_epochs", str(epochs), "--patience", str(epochs)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **env_extra})
    peak_kb = 0
    while proc.poll() is None:
        with contextlib.suppress(OSError, IndexError, ValueError):
            status = open(f"/proc/{proc.pid}/status").read()
            peak_kb = max(peak_kb, int(status.split("VmHWM:")[1].split()[0]))
        time.sleep(0.05)
    wall = time.perf_counter() - start
    stderr = proc.stderr.read().decode()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{stderr[-2000:]}")
    (history,) = glob.glob(os.path.join(out, "*", "history.csv"))
    with open(history) as f:
        rows = list(csv.DictReader(f))
    return {"train_seconds": min(float(r["train_seconds"]) for r in rows), "peak_rss_mb": peak_kb / 1024,
            "wall_seconds": wall,
            "epochs_seconds": sum(float(r["train_seconds"]) + float(r["eval_seconds"]) for r in rows)}


def options_speed(name: str, data_root: str, device: torch.device, steps: int) -> dict:
    """Steps/s of fp32, --use_amp and --compile over `steps` steps: best of 3 interleaved rounds, after the
    warm-up (and compilation) that ours() runs first."""
    runs = {}
    for label, extra in (("fp32", []), ("amp", ["--use_amp"]), ("compile", ["--compile"])):
        exp, _ = make_exp(name, data_root, device, extra)
        ours(exp, 3)  # compiles
        runs[label] = exp
    seconds = minima(rounds_of(3, *(lambda e=e: ours(e, steps)[0] for e in runs.values())))
    return {label: steps / s for label, s in zip(runs, seconds)}


def main(argv=None) -> None:
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data_root", default=os.path.join(REPO, "dataset"), type=cli.existing_folder,
                   help="folder holding ETT-small/ETTh1.csv")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="60 steps instead of full epochs (PatchTST on CPU)")
    p.add_argument("--steps", type=cli.at_least(1), default=None,
                   help="this many steps per measurement (default: an epoch; --quick: 60)")
    p.add_argument("--skip_cli", action="store_true", help="skip the run.py subprocess runs (RSS, DDP)")
    p.add_argument("--skip_options", action="store_true",
                   help="skip the DDP-path and --use_amp/--compile measurements (hundreds of steps each)")
    p.add_argument("--rounds", type=cli.at_least(1), default=None,
                   help="paired rounds of the four measurements (default: 100 for DLinear, 1 for the others)")
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MEASURED), help="which models to measure")
    a = p.parse_args(argv)
    applied = prepare_training_process()  # as run.py does
    malloc = "fixed thresholds" if applied["malloc"] else "left as the environment sets it"
    denormals = "flushed to zero" if applied["flush_denormals"] else "kept (not supported here)"
    device = torch.device(a.device)
    steps = a.steps or (60 if a.quick else None)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {device}"
          + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
          + f", malloc {malloc}, denormals {denormals}")
    peak = matmul_peak(device)
    print(f"measured fp32 matmul peak: {peak / 1e9:.1f} GFLOP/s")

    for name in a.models:
        exp, args = make_exp(name, a.data_root, device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        windows = len(limited(exp.trainer.loader, steps).order)
        n_steps = -(-windows // args.batch_size)
        # DLinear epochs take a fraction of a second: noise matters. The median of paired rounds follows the
        # machine's drift (both of a round run close in time); best times depend on one quiet round each.
        # On the shared 2-core development machine, medians of 30 rounds ranged 1.02-1.14 from run to run,
        # of 100 rounds (~1.5 min) 1.04-1.08; the bootstrap interval printed beside it says how far.
        repeats = a.rounds or (100 if name == "dlinear" else 1)
        rounds = rounds_of(repeats, lambda: ours(exp, steps)[0], lambda: fetch_only(exp, steps),
                           lambda: model_only(exp, n_steps), lambda: field_standard(exp, steps))
        ours_s, fetch_s, limit_s, field_s = minima(rounds)
        eval_s = eval_seconds(exp)
        per_epoch = ours_s * len(exp.trainer.loader) / n_steps
        print(f"\n== {name} ({sum(p.numel() for p in exp.running.model.parameters()):,} parameters, "
              f"{n_steps} steps of {args.batch_size}) ==")
        print(f"ours:            {windows / ours_s:10.0f} windows/s  {ours_s / n_steps * 1e3:8.2f} ms/step  "
              f"epoch {per_epoch:.2f} s")
        print(f"model-only limit:{windows / limit_s:10.0f} windows/s  {limit_s / n_steps * 1e3:8.2f} ms/step")
        print(f"field-standard:  {windows / field_s:10.0f} windows/s  {field_s / n_steps * 1e3:8.2f} ms/step")
        interval = "" if repeats == 1 else \
            " (95% bootstrap interval {:.3f}-{:.3f})".format(*median_ratio_interval(rounds, 0, 2))
        print(f"ours / limit time: median of {repeats} paired rounds {median_ratio(rounds, 0, 2):.3f}{interval}, "
              f"best times {ours_s / limit_s:.3f}   field-standard / ours time {median_ratio(rounds, 3, 0):.2f}x "
              f"(best times {field_s / ours_s:.2f}x)")
        print(f"outside forward/backward/optimizer: {max(ours_s - limit_s, 0) / ours_s:.1%} of step time "
              f"(data fetch alone {fetch_s / ours_s:.1%})")
        print(f"validation + test: {eval_s:.2f} s")
        if device.type == "cuda":
            print(f"peak GPU memory: {torch.cuda.max_memory_allocated(device) / 2**20:.0f} MiB")
        if name == "patchtst":
            flops = step_flops(exp)
            achieved = flops * n_steps / ours_s
            peak = max(peak, matmul_peak(device))  # measured again beside the epoch: shared machines drift
            print(f"matmul FLOPs per step (fwd+bwd) {flops / 1e9:.2f} G: achieved {achieved / 1e9:.1f} GFLOP/s "
                  f"= {achieved / peak:.0%} of the measured peak {peak / 1e9:.1f} GFLOP/s")
        if a.skip_options:
            continue
        # What differs is a few collectives per epoch, far below this machine's drift between two long
        # measurements (2 rounds of 30 PatchTST steps gave -0.3% to +5.8% in three runs): many short rounds
        ddp_steps, ddp_rounds = (steps, 30) if name == "dlinear" else (8, 24)
        overhead, low, high = ddp_world_one_overhead(name, a.data_root, device, ddp_steps, ddp_rounds)
        print(f"DDP code path at world size 1: {overhead:+.1%} time over the plain path (median of "
              f"{ddp_rounds} paired rounds of {ddp_steps or 'all'} steps; 95% bootstrap interval "
              f"{low:+.1%} to {high:+.1%})")
        speeds = options_speed(name, a.data_root, device, 30 if steps or name == "patchtst" else 200)
        print("steps/s: " + "  ".join(f"{k} {v:.1f}" for k, v in speeds.items())
              + f"   (amp x{speeds['amp'] / speeds['fp32']:.2f}, compile x{speeds['compile'] / speeds['fp32']:.2f})")

    if a.skip_cli:
        return
    threads = str(torch.get_num_threads())
    print("\n== run.py in fresh processes: fastest epoch of train seconds as run.py logs them ==")
    for name, epochs in (("dlinear", 5), ("patchtst", 1)):
        if name not in a.models:
            continue
        plain = run_cli(name, a.data_root, [sys.executable], {"OMP_NUM_THREADS": threads}, epochs)
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        one = run_cli(name, a.data_root, [*torchrun, "--nproc_per_node=1"], {"OMP_NUM_THREADS": threads}, epochs)
        two = run_cli(name, a.data_root, [*torchrun, "--nproc_per_node=2"],
                      {"OMP_NUM_THREADS": str(max(int(threads) // 2, 1))}, epochs)
        print(f"{name}: plain {plain['train_seconds']:.2f} s, peak RSS {plain['peak_rss_mb']:.0f} MB | "
              f"torchrun world 1 {one['train_seconds']:.2f} s | world 2 {two['train_seconds']:.2f} s for the same "
              f"windows ({plain['train_seconds'] / two['train_seconds']:.2f}x plain)")
        print(f"{name}: plain process wall {plain['wall_seconds']:.2f} s for {epochs} epoch(s) taking "
              f"{plain['epochs_seconds']:.2f} s with their evaluation; start-up, test and exit "
              f"{plain['wall_seconds'] - plain['epochs_seconds']:.2f} s")


if __name__ == "__main__":
    cli.run(main)
