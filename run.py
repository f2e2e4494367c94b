"""Train and test forecasting models.

    python run.py --model dlinear --nonautoregressive ...               # one process (CPU or one GPU)
    torchrun --nproc_per_node=N run.py --ddp --model timer_xl ...       # N processes, one node
    torchrun --nnodes=M --node_rank=i --rdzv_backend=c10d --rdzv_endpoint=HOST:PORT \\
             --nproc_per_node=N run.py --ddp ...                        # M nodes

Run `python run.py --help` for every flag.
"""
import argparse
import logging
import os
import random
import sys

import numpy as np
import torch

import models
from data_provider.factory import DataBundle, build_data
from exp.exp_forecast import ExpForecast, setting_name
from utils import dist
from utils.args import parse_args, validate
from utils.errors import ConfigError
from utils.log import setup_logging

log = logging.getLogger("run")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def build_model(args, data: DataBundle) -> torch.nn.Module:
    config = argparse.Namespace(**vars(args), enc_in=data.n_channels, n_marks=data.n_marks)
    try:
        return models.build(args.model, config)
    except ValueError as e:
        raise ConfigError(f"model {args.model}: {e}") from None


def main(argv=None) -> list:
    """Returns {"history", "metrics"} of every repetition, on every rank."""
    args = parse_args(argv)
    env = dist.detect(args.ddp, args.device)
    setup_logging(env.rank, env.is_main)
    # Everything that can fail on bad input happens before the first collective, identically on every rank.
    validate(args)
    data = build_data(args, env.device, env.is_main, models.capabilities(args.model).time_marks)
    seed_everything(args.seed)
    model = build_model(args, data)
    if not args.is_training:
        for itr in range(args.itr):
            path = os.path.join(args.checkpoints, args.test_dir or setting_name(args, itr), args.test_file_name)
            if not os.path.isfile(path):
                raise ConfigError(f"--is_training 0 but no checkpoint at {path}; train this setting first "
                                  "or point --test_dir/--test_file_name at one")

    dist.init(env, args.dist_timeout)
    try:
        results = []
        for itr in range(args.itr):
            if itr:
                seed_everything(args.seed + itr)
                model = build_model(args, data)
            exp = ExpForecast(args, env, data, model)
            setting = setting_name(args, itr)
            if args.is_training:
                log.info(">>> training %s", setting)
                exp.train(setting)
            metrics = exp.test(setting, load=not args.is_training)
            results.append({"history": exp.history, "metrics": metrics})
        return results
    finally:
        dist.destroy()


def cli() -> None:
    try:
        main()
    except ConfigError as e:
        rank = os.environ.get("RANK", "0")
        sys.stderr.write(f"error: {e}\n" if rank == "0" else f"[rank {rank}] error: {e}\n")
        sys.exit(2)


if __name__ == "__main__":
    cli()
