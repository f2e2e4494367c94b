"""A grid of runs on every core or GPU, in long-lived workers, resumable: the way to a paper table.

    python -m scripts.sweep --model dlinear,nlinear --data ETTh1 --root_path DIR --output_token_len 96,192 \\
        --seed 2021 2022 2023 --nonautoregressive ...            # any run.py flag; a list of values is an axis
    python -m scripts.sweep --paper dlinear,sparsetsf --datasets ETTh1 --data_root DIR --seed 2021,2022,2023

A flag followed by several values (`--seed 2021 2022`, or a shell's `--seed {2021..2023}`) or by one value
with commas (`--seed 2021,2022`) is an axis of the grid; every combination is one cell, a run.py command line
of one seed. Flags whose values are themselves comma lists (a string hyper-parameter whose default has a comma,
like Time-MoE's --horizons) take a comma value whole. --paper adds, for each model, dataset and horizon, the
command of its paper-setting script (scripts/make_scripts.py), crossed with the other axes.

Cells run in --workers processes (default: one per GPU, else one per CPU core), each importing torch
once, keeping the data files it has read, and using its share of the cores (--threads). A cell whose run has
finished and been tested (its identity's results are there) is skipped, an interrupted one continues from its
last epoch (--resume auto), so a killed sweep run again picks up where it stopped. A failing cell is reported
with its error line and the others go on. Each cell's log is SWEEP_DIR/logs/<cell>.log, its outcome a row of
SWEEP_DIR/cells.csv as soon as it finishes; at the end the report of the results folder (analysis.report: seeds
averaged, paper gaps) is printed and written. --nproc N runs every cell as an N-process DDP job (torchrun).
Flags run.py does not know, and malformed values, stop the sweep before it starts: one line, exit code 2.
"""
import argparse
import contextlib
import gc
import itertools
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import traceback
from typing import NamedTuple

from utils import cli
from utils.errors import ConfigError

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DONE, SKIPPED, FAILED = "done", "skipped", "failed"


class Outcome(NamedTuple):
    status: str             # done | skipped | failed
    seconds: float          # the cell's wall time in its worker
    epoch_seconds: float    # of which its epochs' training and evaluation (the rest is the cell's overhead)
    error: str | None = None


# ---- the grid ----------------------------------------------------------------------------------------------
def list_valued_flags() -> set:
    """Flags whose one value is itself a comma list: string hyper-parameters declared with a comma default."""
    import models  # noqa: PLC0415 - the registry is read only when a grid needs it
    found = set()
    for model in models.loadable().values():
        if isinstance(model, models.ModelFileError):
            continue
        found.update(f"--{f.name}" for f in models.hyperparameter_fields(model)
                     if isinstance(f.default, str) and "," in f.default)
    return found


def axes(tokens: list, whole: set) -> list:
    """[(flag, [values])] in command-line order; a flag without value (a switch) has [] and stays as is."""
    found = []
    for token in tokens:
        if token.startswith("--"):
            found.append((token, []))
        elif not found:
            raise ConfigError(f"{token!r} comes before any flag")
        else:
            flag, values = found[-1]
            values += [token] if flag in whole else [v for v in token.split(",") if v != ""]
    return found


def expand(tokens: list, whole: set = frozenset()) -> list:
    """Every combination of the axes' values, the first axis varying slowest: a list of run.py argvs."""
    flags = axes(tokens, whole)
    cells = []
    for choice in itertools.product(*[values or [None] for _, values in flags]):
        argv = []
        for (flag, _), value in zip(flags, choice):
            argv += [flag] if value is None else [flag, value]
        cells.append(argv)
    return cells


def paper_cells(models_: list, datasets: list, data_root: str, horizons: list | None = None) -> tuple:
    """(run.py argvs of the paper-setting scripts of these models on these datasets, at their benchmark horizons
    or those of `horizons` among them; notes on absent ones). A dataset M4-<Subset> (or M4: every subset) is the
    short-term task's (scripts/short_term_forecast/)."""
    from scripts import make_scripts  # noqa: PLC0415
    cells, notes = [], []
    for model in models_:
        if model not in make_scripts.MODELS and model not in make_scripts.SHORT_TERM:
            raise ConfigError(f"model {model} has no paper settings (scripts/make_scripts.py has them for "
                              f"{', '.join([*make_scripts.MODELS, *make_scripts.SHORT_TERM])})")
        for ds in datasets:
            if ds == "M4" or ds.startswith("M4-"):
                cells += _m4_cells(make_scripts, model, ds, notes)
                continue
            if ds not in make_scripts.DATASETS:
                raise ConfigError(f"dataset {ds} is not a benchmark of scripts/make_scripts.py (they are "
                                  f"{', '.join(make_scripts.DATASETS)}, and M4 or M4-<Subset>)")
            if model not in make_scripts.MODELS or make_scripts.MODELS[model](ds) is None:
                notes.append(f"{model} has no paper setting on {ds}")
                continue
            for horizon in (h for h in make_scripts.DATASETS[ds][1] if horizons is None or h in horizons):
                cells.append(make_scripts.run_flags(model, ds, horizon))
    return [_under(argv, data_root) for argv in cells], notes


def _m4_cells(make_scripts, model: str, ds: str, notes: list) -> list:
    subsets = make_scripts.M4_SUBSETS if ds == "M4" else (ds.removeprefix("M4-"),)
    unknown = [s for s in subsets if s not in make_scripts.M4_SUBSETS]
    if unknown:
        raise ConfigError(f"dataset {ds}: the M4 subsets are {', '.join(make_scripts.M4_SUBSETS)}")
    if model not in make_scripts.SHORT_TERM:
        notes.append(f"{model} has no short-term (M4) paper setting")
        return []
    return [make_scripts.short_term_flags(model, subset) for subset in subsets]


def _under(argv: list, data_root: str) -> list:
    """A script's argv with its ./dataset folder replaced by data_root."""
    at = argv.index("--root_path") + 1
    argv[at] = argv[at].replace("./dataset", data_root.rstrip("/"), 1)
    return argv


def label(argv: list) -> str:
    """A short name of a cell for the progress line, logs and the table of outcomes."""
    def value(*flags):
        for flag in flags:
            if flag in argv:
                last = len(argv) - 1 - argv[::-1].index(flag)  # the last one given wins, as in argparse
                if last + 1 < len(argv):
                    return argv[last + 1]
        return None
    parts = [value("--model") or "timer_xl", value("--data") or "synthetic", value("--model_id"),
             value("--test_pred_len", "--output_token_len", "--pred_len"), value("--seed") and f"s{value('--seed')}"]
    return "_".join(str(p) for p in parts if p)


# ---- one cell in a worker -----------------------------------------------------------------------------------
def finished(argv: list, world_size: int) -> bool:
    """Whether this cell's run (trained on world_size processes) has finished and its test's metrics are
    written. argv has --resume auto, under which a finished run plans no training."""
    import models  # noqa: PLC0415
    from data_provider.factory import build_data  # noqa: PLC0415
    from exp.config import parse_args, resolve  # noqa: PLC0415
    from exp.identity import plan_runs  # noqa: PLC0415
    from utils import dist  # noqa: PLC0415
    args = resolve(parse_args(argv))
    env = dist.detect(False, args.device)
    data = build_data(args, env.device, True, models.capabilities(args.model).time_marks)
    plans = plan_runs(args, data, world_size)
    return all(not p.train and os.path.isfile(os.path.join(p.results_dir, p.test, "metrics.json")) for p in plans)


@contextlib.contextmanager
def logged_to(path: str):
    """This process's output and the framework's log lines into the file at path (appended), then back."""
    from utils.log import setup_logging  # noqa: PLC0415
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as log, contextlib.redirect_stderr(log), contextlib.redirect_stdout(log):
        setup_logging(0, True)  # run.main binds it again, to the same stream
        try:
            yield log
        finally:
            logging.getLogger().handlers.clear()  # the file closes with the block


def run_cell(argv: list, log_path: str, nproc: int) -> Outcome:
    """Run one cell (or find it done); its log goes to log_path."""
    import run  # noqa: PLC0415 - imported once per worker, at its first cell
    start = time.perf_counter()
    argv = [*argv, "--resume", "auto"]  # an interrupted cell continues; a finished one is skipped before
    with logged_to(log_path) as log:
        try:
            if finished(argv, nproc):
                return Outcome(SKIPPED, time.perf_counter() - start, 0.0)
            if nproc > 1:  # a DDP cell: its own torchrun job, its output into the same log
                if torchrun(nproc, [os.path.join(HERE, "run.py"), "--ddp", *argv], log):
                    return Outcome(FAILED, time.perf_counter() - start, 0.0, last_error(log_path))
                epochs = 0.0  # timed inside the job; its start-up is the cost of a DDP cell
            else:
                epochs = sum(r["epoch_seconds"] for r in run.main(argv))
        except Exception as e:  # noqa: BLE001 - one cell's failure is reported; the others go on
            traceback.print_exc(file=log)
            return Outcome(FAILED, time.perf_counter() - start, 0.0, f"{type(e).__name__}: {str(e).splitlines()[0]}")
    return Outcome(DONE, time.perf_counter() - start, epochs)


def torchrun_command(nproc: int, entry: list) -> list:
    """`torchrun --standalone --nproc_per_node NPROC ENTRY...` with this interpreter."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *entry]


def torchrun(nproc: int, entry: list, log) -> int:
    """torchrun_command's job, its output appended to the open file log: its exit code."""
    log.flush()
    return subprocess.run(torchrun_command(nproc, entry), stdout=log, stderr=subprocess.STDOUT, cwd=HERE).returncode


def last_error(log_path: str) -> str:
    """The last line of a failed DDP job's log that names an error."""
    with open(log_path) as f:
        return cli.error_line(f.read(), "the job failed (see its log)")


def prepare_worker(threads: int) -> None:
    """A process about to run many cells: imports once what every run needs, then freezes the collector."""
    import threading  # noqa: PLC0415
    import torch  # noqa: PLC0415 - after the parent set this worker's devices
    import torch._dynamo  # noqa: F401, PLC0415 - what every run imports lazily (its optimizer, TensorBoard), once
    import torch.utils.tensorboard  # noqa: F401, PLC0415
    from tqdm import tqdm  # noqa: PLC0415
    import run  # noqa: F401, PLC0415
    torch.set_num_threads(threads)
    # tqdm's default lock is a multiprocessing one: in a spawned process a named semaphore, which a worker stopped
    # mid-cell (an interrupted or killed sweep) would leave behind, and the resource tracker warn of at exit. The
    # bars of a worker's runs go to their logs alone: a thread lock serves.
    tqdm.set_lock(threading.RLock())
    # Everything imported so far lives as long as the worker: the collector need not scan it again at every
    # cell (run.main collects garbage after each run, which would cost ~0.4 s a cell over torch's objects).
    gc.freeze()


def end_with_parent(parent: int) -> None:
    """A worker must not outlive its sweep: killed (SIGTERM or SIGKILL skip the sweep's clean-up), it would go on
    through the queued cells and, once the sweep is run again, train the same cells as the new workers. On Linux
    the kernel sends it SIGTERM when the sweep dies; elsewhere it stops before its next cell."""
    if sys.platform.startswith("linux"):
        import ctypes  # noqa: PLC0415
        import signal  # noqa: PLC0415
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the sweep died before that took effect
        os._exit(1)


def _worker(connection, threads: int, nproc: int, parent: int) -> None:
    """Runs the cells the sweep sends over `connection`, answering each with its Outcome, until told to stop."""
    end_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the sweep decides
    prepare_worker(threads)
    while True:
        try:
            task = connection.recv()
        except EOFError:  # the sweep has gone
            return
        if task is None or os.getppid() != parent:
            return
        index, argv, log_path = task
        connection.send((index, run_cell(argv, log_path, nproc)))


# ---- the sweep ----------------------------------------------------------------------------------------------
def plan_workers(nproc: int, devices: list | None) -> tuple:
    """(workers, CPU threads per process, the GPU ids each worker sees or None): nproc GPUs per worker on a
    GPU machine (all visible ones, or `devices`), otherwise one worker per nproc cores."""
    import torch  # noqa: PLC0415
    cores = os.cpu_count() or 1
    if devices is None and torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
    if devices:
        if len(devices) < nproc:
            raise ConfigError(f"{len(devices)} GPUs cannot run cells of --nproc {nproc}")
        per_worker = [devices[w * nproc:(w + 1) * nproc] for w in range(len(devices) // nproc)]
        return len(per_worker), max(cores // len(devices), 1), per_worker
    workers = max(cores // nproc, 1)  # independent processes scale better than threads within one
    return workers, max(cores // (workers * nproc), 1), None


def worker_gpus(gpus: list | None, worker: int) -> list | None:
    """The GPU ids worker `worker` sees: with more workers than GPU groups (--workers, for models too small
    to fill a GPU alone), the groups are shared out in turn."""
    return gpus[worker % len(gpus)] if gpus else None


@contextlib.contextmanager
def spawn_environment(threads: int, devices: list | None):
    """While a worker is spawned (it starts with this process's environment): its CPU threads and, on a GPU
    machine, the GPUs it sees; restored afterwards."""
    saved = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")}
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if devices:
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    try:
        yield
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def run_group(tasks: list, threads: int, nproc: int) -> list:
    """[(argv, log path)] run one after the other in this process: one task of a job array."""
    prepare_worker(threads)
    return [run_cell(argv, log_path, nproc) for argv, log_path in tasks]


def submit(cells: list, sweep_dir: str, tasks: int, threads: int, nproc: int, executor_kind: str,
           parameters: dict) -> list:
    """The cells as a job array through submitit (`slurm`, or `local`: processes on this machine), dealt
    round-robin to `tasks` array tasks that each run their share like a worker; waits for them. The results
    folder must be on storage every node sees; a task's cells are skipped or resumed there as in a sweep."""
    import submitit  # noqa: PLC0415
    record = Record(sweep_dir, cells)
    logs = [cell_log(sweep_dir, name) for name in record.names]
    groups = [list(range(t, len(cells), tasks)) for t in range(min(tasks, len(cells)))]
    executor = submitit.AutoExecutor(folder=os.path.join(sweep_dir, "submitit"), cluster=executor_kind)
    executor.update_parameters(**parameters)
    jobs = executor.map_array(run_group, [[(cells[i], logs[i]) for i in g] for g in groups],
                              [threads] * len(groups), [nproc] * len(groups))
    print(f"submitted {len(jobs)} array tasks ({executor_kind}): {jobs[0].job_id.split('_')[0]}")
    for group, job in zip(groups, jobs):
        try:
            outcomes = job.results()[0]
        except Exception as e:  # noqa: BLE001 - a task that died (time limit, node failure): its cells failed
            outcomes = [Outcome(FAILED, 0.0, 0.0, f"array task {job.job_id} failed: {str(e).splitlines()[-1]}")] \
                * len(group)
        for i, outcome in zip(group, outcomes):
            record.add(i, outcome)
            if outcome.error:
                print(f"failed: {record.names[i]}: {outcome.error}", file=sys.stderr)
    return record.results


def cell_names(cells: list) -> list:
    return [f"{i:03d}_{label(argv)}" for i, argv in enumerate(cells)]


def cell_log(sweep_dir: str, name: str) -> str:
    return os.path.join(sweep_dir, "logs", f"{name}.log")


class Record:
    """SWEEP_DIR/cells.csv: the outcome of every cell finished so far, written again (atomically) as each one
    finishes, so that a sweep killed midway leaves the cells it finished recorded."""
    FIELDS = ("cell", "outcome", "seconds", "epoch_seconds", "error", "command")

    def __init__(self, sweep_dir: str, cells: list):
        self.path, self.cells, self.names = os.path.join(sweep_dir, "cells.csv"), cells, cell_names(cells)
        self.results = [None] * len(cells)

    def add(self, index: int, outcome: Outcome) -> None:
        from utils.files import write_csv  # noqa: PLC0415
        self.results[index] = outcome
        write_csv(self.path, self.FIELDS, [
            dict(zip(self.FIELDS, (name, r.status, f"{r.seconds:.3f}", f"{r.epoch_seconds:.3f}", r.error or "",
                                   " ".join(argv))))
            for name, r, argv in zip(self.names, self.results, self.cells) if r is not None])


def sweep(cells: list, sweep_dir: str, workers: int, threads: int, nproc: int = 1, gpus: list | None = None,
          progress: bool = True) -> list:
    """Run every cell; returns their Outcomes in cell order.

    Each worker has a pipe of its own: an idle worker is sent the next cell and answers with its outcome. Pipes
    hold no named semaphores (a multiprocessing queue does), so a sweep killed midway leaves none behind."""
    from multiprocessing.connection import wait  # noqa: PLC0415
    from tqdm import tqdm  # noqa: PLC0415
    record = Record(sweep_dir, cells)
    context = multiprocessing.get_context("spawn")  # no inherited torch state, threads or CUDA context
    alive = {}  # the sweep's end of each worker's pipe -> the worker
    for w in range(min(workers, len(cells))):
        ours, theirs = context.Pipe()
        with spawn_environment(threads, worker_gpus(gpus, w)):
            worker = context.Process(target=_worker, args=(theirs, threads, nproc, os.getpid()), daemon=True)
            worker.start()
        theirs.close()
        alive[ours] = worker
    queued, running = list(range(len(cells))), {}  # running: pipe -> the cell its worker runs
    bar = tqdm(total=len(cells), desc="sweep", disable=not progress, dynamic_ncols=True)

    def finish(index: int, outcome: Outcome) -> None:
        record.add(index, outcome)
        bar.update(1)
        if outcome.error:
            bar.write(f"failed: {record.names[index]}: {outcome.error}", file=sys.stderr)
        count = {status: sum(r is not None and r.status == status for r in record.results)
                 for status in (DONE, SKIPPED, FAILED)}
        bar.set_postfix(**count, running=len(running))

    try:
        while queued or running:
            for pipe in [pipe for pipe in alive if pipe not in running]:
                if not queued:
                    break
                try:
                    pipe.send((queued[0], cells[queued[0]], cell_log(sweep_dir, record.names[queued[0]])))
                except OSError:  # its worker has died: found below
                    continue
                running[pipe] = queued.pop(0)
            if not alive:
                for index in queued:
                    finish(index, Outcome(FAILED, 0.0, 0.0, "no worker left to run it"))
                break
            ready = wait([*alive, *(worker.sentinel for worker in alive.values())])
            for pipe, worker in list(alive.items()):
                if pipe in ready:
                    try:
                        index, outcome = pipe.recv()
                    except EOFError:  # the worker is ending
                        worker.join()
                    else:
                        del running[pipe]
                        finish(index, outcome)
                        continue
                if not worker.is_alive():  # killed from outside (out of memory): its cell fails, the rest go on
                    del alive[pipe]
                    pipe.close()
                    if pipe in running:
                        finish(running.pop(pipe), Outcome(FAILED, 0.0, 0.0,
                                                          f"its worker died (exit code {worker.exitcode})"))
    except BaseException as e:
        for worker in alive.values():  # the cells they run stop where they are; run again, they resume
            worker.terminate()
        if isinstance(e, KeyboardInterrupt):
            finished = sum(r is not None for r in record.results)
            raise KeyboardInterrupt(f"{finished} of {len(cells)} cells finished, their outcomes in {record.path}; "
                                    "the same command again runs the rest") from None
        raise
    finally:
        bar.close()
        for pipe, worker in alive.items():
            with contextlib.suppress(OSError):
                pipe.send(None)
            worker.join(timeout=10)
            if worker.is_alive():
                worker.terminate()
                worker.join(timeout=10)
            if worker.is_alive():  # one that SIGTERM does not end must not hold the sweep open
                worker.kill()
                worker.join()
            pipe.close()
    return record.results


def parse(argv: list) -> tuple:
    """(the sweep's own options, the run.py tokens of the grid)."""
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                           allow_abbrev=False)  # an abbreviation would take a run.py flag for one of ours
    p.add_argument("--workers", type=cli.at_least(1), help="processes running cells at once (default: see above); "
                   "more workers than GPUs share them in turn")
    p.add_argument("--threads", type=cli.at_least(1), help="CPU threads per worker (default: the cores shared out)")
    p.add_argument("--nproc", type=cli.at_least(1), default=1,
                   help="processes per cell: N > 1 runs each cell under DDP")
    p.add_argument("--devices", help="comma list of the GPU ids to use (default: every visible GPU)")
    p.add_argument("--paper", help="comma list of models: their paper-setting scripts' cells (with --datasets)")
    p.add_argument("--datasets", help="comma list of benchmark datasets for --paper (M4 or M4-<Subset>: the "
                                      "short-term task's, scripts/short_term_forecast/)")
    p.add_argument("--horizons", type=cli.int_list,
                   help="comma list: --paper's cells at these of each dataset's horizons only")
    p.add_argument("--data_root", default=os.environ.get("DATA_ROOT", "./dataset"),
                   help="folder of the benchmark datasets for --paper (default $DATA_ROOT or ./dataset)")
    p.add_argument("--sweep_dir", help="where logs and cells.csv go (default: RESULTS_DIR/sweep)")
    p.add_argument("--submit", choices=("slurm", "local"), help="submit the cells as a job array through submitit "
                   "(local: processes on this machine, for trying it) instead of running workers here")
    p.add_argument("--tasks", type=cli.at_least(1), default=4,
                   help="with --submit: array tasks the cells are dealt to (4)")
    p.add_argument("--partition", help="with --submit slurm: the partition")
    p.add_argument("--gpus_per_task", type=cli.at_least(0), default=0, help="with --submit slurm: GPUs of each task")
    p.add_argument("--timeout_min", type=cli.at_least(1), default=60,
                   help="with --submit: time limit of a task in minutes")
    p.add_argument("--dry_run", action="store_true", help="print the cells and stop")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_known_args(argv)


def parse_cells(cells: list) -> list:
    """run.py's arguments of every cell: a flag run.py does not know or a malformed value stops the sweep before
    it starts, not each cell in its worker."""
    from exp.config import parse_args  # noqa: PLC0415
    parsed = []
    for name, argv in zip(cell_names(cells), cells):
        try:
            parsed.append(parse_args(argv))
        except ConfigError as e:
            raise ConfigError(f"cell {name}: {e}" if len(cells) > 1 else str(e)) from None
    return parsed


def main(argv=None) -> list:
    options, tokens = parse(sys.argv[1:] if argv is None else argv)
    if options.paper and not options.datasets:
        raise ConfigError("--paper needs --datasets")
    grid = expand(tokens, list_valued_flags())
    if options.paper:
        paper, notes = paper_cells(options.paper.split(","), options.datasets.split(","), options.data_root,
                                   options.horizons)
        cells = [p + g for p in paper for g in grid]
    else:
        cells, notes = grid, []
    if not cells or cells == [[]]:
        raise ConfigError("no cells: give run.py flags, --paper MODELS --datasets DATASETS, or both")
    for note in notes:
        print(f"note: {note}")
    results_dir = parse_cells(cells)[0].results_dir  # where results go, as run.py decides it
    if options.dry_run:
        print("\n".join(" ".join(c) for c in cells))
        return []
    workers, threads, gpus = plan_workers(options.nproc, options.devices.split(",") if options.devices else None)
    workers, threads = options.workers or workers, options.threads or threads
    sweep_dir = options.sweep_dir or os.path.join(results_dir, "sweep")
    workers = min(workers, len(cells))
    if options.submit:
        parameters = {"timeout_min": options.timeout_min, **({"slurm_partition": options.partition}
                                                              if options.partition else {}),
                      "cpus_per_task": threads * options.nproc, "gpus_per_node": options.gpus_per_task,
                      "slurm_array_parallelism": options.tasks}
        if options.submit == "local":  # the local executor knows no SLURM parameters
            parameters = {"timeout_min": options.timeout_min}
        results = submit(cells, sweep_dir, options.tasks, threads, options.nproc, options.submit, parameters)
    else:
        print(f"{len(cells)} cells on {workers} workers x {threads} threads; logs in {sweep_dir}/logs")
        results = sweep(cells, sweep_dir, workers, threads, options.nproc, gpus, progress=not options.quiet)
    failed = [r for r in results if r.status == FAILED]
    ran = [r for r in results if r.status == DONE]
    from analysis import report  # noqa: PLC0415
    with contextlib.suppress(ConfigError):  # no finished run at all: the failures above say why
        report.main([results_dir])
    overhead = f" (beyond their epochs {sum(r.seconds - r.epoch_seconds for r in ran) / len(ran):.2f} s a cell)" \
        if ran and options.nproc == 1 else ""
    print(f"{len(ran)} run{overhead}, {sum(r.status == SKIPPED for r in results)} already done, {len(failed)} "
          f"failed; outcomes in {os.path.join(sweep_dir, 'cells.csv')}")
    return results


if __name__ == "__main__":
    sys.exit(1 if any(r.status == FAILED for r in cli.run(main)) else 0)
