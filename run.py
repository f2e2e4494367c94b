"""Train and test forecasting models.

    python run.py --model dlinear --nonautoregressive ...               # one process (CPU or one GPU)
    torchrun --nproc_per_node=N run.py --ddp --model timer_xl ...       # N processes, one node
    torchrun --nnodes=M --node_rank=i --rdzv_backend=c10d --rdzv_endpoint=HOST:PORT \\
             --nproc_per_node=N run.py --ddp ...                        # M nodes

Run `python run.py --help` for every flag.
"""
import argparse
import gc
import logging
import os
import random
import sys
import traceback

import numpy as np
import torch

import models
from data_provider.factory import DataBundle, build_data
from exp.exp_forecast import ExpForecast, setting_name
from utils import checkpoint, dist
from utils.allocator import keep_freed_memory
from utils.args import parse_args, validate
from utils.errors import ConfigError, TrainingError
from utils.log import setup_logging

log = logging.getLogger("run")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_model(args, data: DataBundle) -> torch.nn.Module:
    config = argparse.Namespace(**vars(args), enc_in=data.n_channels, n_marks=data.n_marks)
    try:
        model = models.build(args.model, config)
    except ValueError as e:
        raise ConfigError(f"model {args.model}: {e}") from None
    if args.adaptation:
        state = checkpoint.load(args.pretrain_model_path, torch.device("cpu"))
        # a checkpoint of this framework keeps the weights under "model"; a plain state_dict is the weights
        checkpoint.load_trainable_state(model, state["model"] if isinstance(state.get("model"), dict) else state)
        log.info("loaded pretrained weights from %s", args.pretrain_model_path)
    return model


def _check_writable(path: str, flag: str) -> None:
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe) or not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: cannot write there ({probe} is not a writable folder)")


def preflight(args, env: dist.DistEnv, data: DataBundle) -> None:
    """File-system and group-size checks, on every rank alike, before the first collective."""
    _check_writable(args.results_dir, "--results_dir")
    _check_writable(args.checkpoints, "--checkpoints")
    if args.resume not in (None, "auto") and not os.path.isfile(args.resume):
        raise ConfigError(f"--resume {args.resume}: no such checkpoint (use --resume auto to start fresh if absent)")
    if args.adaptation and not os.path.isfile(args.pretrain_model_path):
        raise ConfigError(f"--pretrain_model_path {args.pretrain_model_path}: no such file")
    per_step = args.batch_size * args.accum_steps * env.world_size
    if len(data.datasets["train"]) < per_step:
        raise ConfigError(f"the train split has {len(data.datasets['train'])} windows, fewer than one step of "
                          f"batch_size x accum_steps x world size = {per_step}; use a smaller batch or more data")
    for split in ("val", "test"):
        if env.world_size > len(data.datasets[split]):
            raise ConfigError(f"world size {env.world_size} exceeds the {len(data.datasets[split])} {split} windows: "
                              "every rank needs one; use fewer processes or a longer split")
    if not args.is_training:
        for itr in range(args.itr):
            path = os.path.join(args.checkpoints, args.test_dir or setting_name(args, itr), args.test_file_name)
            if not os.path.isfile(path):
                raise ConfigError(f"--is_training 0 but no checkpoint at {path}; train this setting first "
                                  "or point --test_dir/--test_file_name at one")


def run_repetition(args, env: dist.DistEnv, data: DataBundle, model: torch.nn.Module, itr: int) -> dict:
    exp = ExpForecast(args, env, data, model, itr)
    setting = setting_name(args, itr)
    if args.is_training:
        log.info(">>> training %s", setting)
        exp.train(setting)
    metrics = exp.test(setting, load=not args.is_training)
    return {"history": exp.history, "metrics": metrics}


def main(argv=None) -> list:
    """Returns {"history", "metrics"} of every repetition, on every rank."""
    args = parse_args(argv)
    env = dist.detect(args.ddp, args.device)
    setup_logging(env.rank, env.is_main)
    # Everything that can fail on bad input happens before the first collective, identically on every rank.
    validate(args)
    data = build_data(args, env.device, env.is_main, models.capabilities(args.model).time_marks)
    preflight(args, env, data)
    seed_everything(args.seed)
    model = build_model(args, data)

    dist.init(env, args.dist_timeout)
    try:
        results = []
        for itr in range(args.itr):
            if itr:
                seed_everything(args.seed + itr)
                model = build_model(args, data)
            results.append(run_repetition(args, env, data, model, itr))
            del model
            # DDP's reducer must go while the process group is still registered: freed after it, the group's
            # destructor would join gloo threads under the GIL they wait for (a hang at exit)
            gc.collect()
        return results
    finally:
        dist.destroy()


def cli(argv=None) -> list:
    """main() for the command line: user errors and failures of the group end in one line and a non-zero
    exit code, not a traceback; returns main's results otherwise.

    Errors leave through os._exit: after a failed collective, tearing down a process group can block.
    (Run as a script, a successful run leaves through it too, see the end of this file.)
    """
    keep_freed_memory()  # this process is a training loop: stop glibc refaulting each step's memory
    rank = os.environ.get("RANK", "0")
    prefix = "error: " if rank == "0" else f"[rank {rank}] error: "
    try:
        return main(argv)
    except ConfigError as e:
        _exit(2, f"{prefix}{e}")
    except TrainingError as e:
        _exit(1, f"{prefix}{e}")
    except Exception as e:  # noqa: BLE001 - a bug keeps its traceback, a failed collective gets one line
        failure = dist.describe_failure(e)
        _exit(1, f"{prefix}{failure}" if failure else traceback.format_exc().rstrip())


def _exit(code: int, message: str | None = None) -> None:
    if message:
        sys.stderr.write(message + "\n")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    cli()
    # Every output is written and closed by now. Skipping the interpreter's teardown of torch's module graph
    # saves 0.4-0.8 s per run, which adds up over hundreds of short jobs.
    _exit(0)
