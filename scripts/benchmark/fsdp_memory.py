"""Memory per rank of a 100M-parameter Timer-XL and Timer under DDP and FSDP, with and without each option; and of
fine-tuning a published foundation model.

    python -m scripts.benchmark.fsdp_memory [--models timer_xl,timer] [--nproc 2] [--steps 3]
                                            [--configs ddp,fsdp,fsdp_ac,fsdp_ac_amp]
    python -m scripts.benchmark.fsdp_memory --published chronos_bolt --configs ddp,fsdp,lora,fsdp_lora

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
lora          --finetune lora (with --published): rank-8 adapters trained, the published weights frozen
fsdp_lora     --fsdp --finetune lora
(--cpu_offload moves shards off a GPU: a CPU run has nothing to offload, and refuses the flag.)

--published chronos_bolt fine-tunes a Chronos-Bolt of chronos-bolt-small's published architecture (48M parameters,
random weights made by the publisher's class and saved in its format) through --pretrained, on windows of 512 points
forecasting its native 64, each of the 8 channels a series.
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
           "fsdp_ac_amp": ["--fsdp", "--activation_checkpointing", "--use_amp"],
           "lora": ["--finetune", "lora"], "fsdp_lora": ["--fsdp", "--finetune", "lora"]}
PUBLISHED = ("chronos_bolt",)
MODEL = ["--d_model", "1024", "--d_ff", "4096", "--e_layers", "8", "--n_heads", "16", "--seq_len", "672",
         "--input_token_len", "96", "--output_token_len", "96"]


def published_checkpoint(folder: str) -> list:
    """run.py's model flags for a random Chronos-Bolt of chronos-bolt-small's architecture, saved as published."""
    from chronos.chronos_bolt import ChronosBoltModelForForecasting
    from transformers import T5Config
    path = os.path.join(folder, "chronos-bolt-small")
    config = {"chronos_pipeline_class": "ChronosBoltPipeline", "architectures": ["ChronosBoltModelForForecasting"],
              "chronos_config": {"context_length": 2048, "input_patch_size": 16, "input_patch_stride": 16,
                                 "prediction_length": 64, "quantiles": [q / 10 for q in range(1, 10)],
                                 "use_reg_token": True},
              "d_model": 512, "d_ff": 2048, "d_kv": 64, "num_heads": 8, "num_layers": 6, "num_decoder_layers": 6,
              "dropout_rate": 0.1, "feed_forward_proj": "relu", "decoder_start_token_id": 0, "pad_token_id": 0,
              "eos_token_id": 1, "is_encoder_decoder": True, "initializer_factor": 0.05}
    ChronosBoltModelForForecasting(T5Config(**config)).save_pretrained(path)
    return ["--pretrained", path, "--nonautoregressive", "--seq_len", "512", "--output_token_len", "64",
            "--loss", "quantile"]


def measure(model: str, config: str, args, folder: str, csv: str, model_flags: list) -> None:
    log, wall = torchrun(args.nproc, [
        "--model", model, *model_flags, *CONFIGS[config], "--data", "custom", "--root_path", os.path.dirname(csv),
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
    parser.add_argument("--published", default=None, choices=PUBLISHED,
                        help="fine-tune this published model instead of --models (needs requirements-foundation.txt)")
    args = parser.parse_args(argv)
    unknown = [c for c in args.configs.split(",") if c not in CONFIGS]
    if unknown:
        raise ConfigError(f"--configs {unknown[0]}: the configurations are {', '.join(CONFIGS)}")
    for model in args.models.split(","):
        try:
            models.resolve(model)
        except KeyError:
            raise ConfigError(f"--models {model}: unknown model; available: {', '.join(models.NAMES)}") from None
    if any(config in ("lora", "fsdp_lora") for config in args.configs.split(",")) and not args.published:
        raise ConfigError("--configs lora and fsdp_lora fine-tune a published model: add --published chronos_bolt")
    with tempfile.TemporaryDirectory() as folder:
        if args.published:
            try:
                model_flags, chosen = published_checkpoint(folder), [args.published]
            except ImportError as e:
                raise ConfigError(f"--published {args.published} needs {e.name}: pip install -r "
                                  "requirements-foundation.txt") from None
        else:
            model_flags, chosen = MODEL, args.models.split(",")
        csv = os.path.join(folder, "synthetic8.csv")
        synthetic.write_csv(synthetic.generate(length=4000, n_covariates=7, seed=0), csv)
        print(f"{args.nproc} ranks, batch 8 per rank, {args.steps} steps")
        print("| model | configuration | parameters | peak RSS per rank (MB) | parameters + optimizer state per rank "
              "(MB) | s/step | wall s |")
        print("|---|---|---|---|---|---|---|")
        for model in chosen:
            for config in args.configs.split(","):
                measure(model, config, args, folder, csv, model_flags)


if __name__ == "__main__":
    cli.run(main)
