"""Memory per rank of a 100M-parameter Timer-XL and Timer under DDP and FSDP, with and without each option.

    python -m scripts.benchmark.fsdp_memory [--models timer_xl,timer] [--nproc 2] [--steps 3]
                                            [--configs ddp,fsdp,fsdp_ac,fsdp_ac_amp]

Each configuration is one `torchrun --nproc_per_node NPROC run.py --ddp` of --steps optimizer steps at batch 8 per
rank (d_model 1024, d_ff 4096, 8 layers, 16 heads; windows of 672 + 96 points of an 8-channel synthetic CSV the
script writes), validated and tested on 8 windows. Printed per configuration: every rank's peak RSS and its
parameters + optimizer state (both logged by the run), and the seconds per step. Numbers only; nothing is
asserted. Results and commands go in docs/scaling.md.

ddp           plain DDP: every rank holds the whole model, its gradients and Adam's two moments
fsdp          --fsdp: each rank holds 1/NPROC of them; a block's parameters are gathered for its forward and
              backward only
fsdp_ac       + --activation_checkpointing: each block keeps its input only, and runs again in the backward
fsdp_ac_amp   + --use_amp: parameters gathered and used in bf16 (AVX512-BF16 on this CPU)
(--cpu_offload moves shards off a GPU: a CPU run has nothing to offload, and refuses the flag.)
"""
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, HERE)

import models  # noqa: E402
from data_provider import synthetic  # noqa: E402
from scripts.benchmark.launch import peak_rss, torchrun, train_seconds  # noqa: E402
from utils import cli  # noqa: E402
from utils.errors import ConfigError  # noqa: E402

CONFIGS = {"ddp": [], "fsdp": ["--fsdp"], "fsdp_ac": ["--fsdp", "--activation_checkpointing"],
           "fsdp_ac_amp": ["--fsdp", "--activation_checkpointing", "--use_amp"]}
MODEL = ["--d_model", "1024", "--d_ff", "4096", "--e_layers", "8", "--n_heads", "16", "--seq_len", "672",
         "--input_token_len", "96", "--output_token_len", "96"]


def measure(model: str, config: str, args, folder: str, csv: str) -> None:
    log, wall = torchrun(args.nproc, [
        "--model", model, *MODEL, *CONFIGS[config], "--data", "custom", "--root_path", os.path.dirname(csv),
        "--data_path", os.path.basename(csv), "--batch_size", "8", "--train_steps", str(args.steps), "--lradj",
        "constant", "--val_windows", "8", "--val_windows_end", "8", "--test_windows", "8", "--des", config,
        "--checkpoints", os.path.join(folder, "ckpt"), "--results_dir", os.path.join(folder, "results")])
    state = re.search(r"parameters \+ optimizer state per rank: ([\d., ]+) MB", log).group(1)
    parameters = int(re.search(r"(\d+) parameters, \d+ trainable", log).group(1))
    print(f"| {model} | {config} | {parameters / 1e6:.1f}M | {peak_rss(log)} | {state} | "
          f"{train_seconds(log) / args.steps:.1f} | {wall:.0f} |", flush=True)


def main(argv=None) -> None:
    parser = cli.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="timer_xl,timer")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--nproc", type=cli.at_least(1), default=2)
    parser.add_argument("--steps", type=cli.at_least(1), default=3)
    args = parser.parse_args(argv)
    unknown = [c for c in args.configs.split(",") if c not in CONFIGS]
    if unknown:
        raise ConfigError(f"--configs {unknown[0]}: the configurations are {', '.join(CONFIGS)}")
    for model in args.models.split(","):
        try:
            models.resolve(model)
        except KeyError:
            raise ConfigError(f"--models {model}: unknown model; available: {', '.join(models.NAMES)}") from None
    with tempfile.TemporaryDirectory() as folder:
        csv = os.path.join(folder, "synthetic8.csv")
        synthetic.write_csv(synthetic.generate(length=4000, n_covariates=7, seed=0), csv)
        print(f"{args.nproc} ranks, batch 8 per rank, {args.steps} steps")
        print("| model | configuration | parameters | peak RSS per rank (MB) | parameters + optimizer state per rank "
              "(MB) | s/step | wall s |")
        print("|---|---|---|---|---|---|---|")
        for model in args.models.split(","):
            for config in args.configs.split(","):
                measure(model, config, args, folder, csv)


if __name__ == "__main__":
    cli.run(main)
