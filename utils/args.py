"""Command-line flags and their start-up validation (one clear line per mistake)."""
import argparse

import models
from data_provider.factory import DATA_NAMES
from utils.errors import ConfigError
from utils.schedule import LR_SCALES, LRADJ


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one clear line (via run.py's handler) instead of usage + message
        raise ConfigError(f"{message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        description="Train and evaluate time-series forecasting models on 1 CPU, 1 GPU, or many GPUs/nodes "
                    "(torchrun --nproc_per_node=N run.py --ddp ...).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)

    g = p.add_argument_group("experiment")
    g.add_argument("--is_training", type=int, default=1, choices=[0, 1],
                   help="1: train, then test the best checkpoint; 0: only test the best checkpoint of this setting")
    g.add_argument("--model", default="timer_xl", help=f"model name, one of {sorted(models.MODELS)}")
    g.add_argument("--model_id", default="run", help="free-form tag that starts the setting name")
    g.add_argument("--des", default="exp", help="free-form description appended to the setting name")
    g.add_argument("--itr", type=int, default=1, help="repetitions; repetition i uses seed + i")
    g.add_argument("--seed", type=int, default=2021, help="random seed (identical on every rank)")

    g = p.add_argument_group("data")
    g.add_argument("--data", default="synthetic", choices=DATA_NAMES,
                   help="ETT*: standard 12/4/4-month split; custom: CSV (date column first) or .npy, 70/10/20; "
                        "synthetic: generated CSV, written to root_path/data_path if absent")
    g.add_argument("--root_path", default="./dataset/synthetic/", help="folder of the data file")
    g.add_argument("--data_path", default=None,
                   help="data file inside root_path (default: <data>.csv for ETT, synthetic.csv for synthetic)")
    g.add_argument("--target", default="OT", help="target column of a CSV; moved to the last channel")
    g.add_argument("--univariate", action="store_true",
                   help="treat every channel as its own series (channel-independent windows)")
    g.add_argument("--subset_rand_ratio", type=float, default=1.0,
                   help="train on a seeded random subset of this fraction of the training windows")

    g = p.add_argument_group("forecasting")
    g.add_argument("--seq_len", type=int, default=672, help="input (lookback) length")
    g.add_argument("--input_token_len", type=int, default=96, help="points per input token (token models)")
    g.add_argument("--output_token_len", type=int, default=96,
                   help="points predicted per token (autoregressive) or in one shot (direct)")
    g.add_argument("--test_pred_len", type=int, default=None,
                   help="test horizon, rolled out in steps of output_token_len (default: output_token_len)")
    g.add_argument("--nonautoregressive", action="store_true",
                   help="direct multi-step training on the output_token_len points after the window")
    g.add_argument("--covariate", action="store_true",
                   help="all channels in; loss and metrics on the target (last) channel only")
    g.add_argument("--last_token", action="store_true", help="with --covariate: loss on the last token only")
    g.add_argument("--valid_last", action="store_true",
                   help="validate like test: only the forecast after the window (last token)")

    g = p.add_argument_group("model")
    g.add_argument("--d_model", type=int, default=512, help="width of token embeddings / hidden layers")
    g.add_argument("--n_heads", type=int, default=8, help="attention heads")
    g.add_argument("--e_layers", type=int, default=1, help="number of Transformer layers")
    g.add_argument("--d_ff", type=int, default=2048, help="hidden width of the feed-forward blocks")
    g.add_argument("--dropout", type=float, default=0.1, help="dropout probability")
    g.add_argument("--activation", default="relu", choices=["relu", "gelu"], help="feed-forward activation")
    g.add_argument("--use_norm", action="store_true", help="instance normalisation of each input window")
    g.add_argument("--moving_avg", type=int, default=25,
                   help="DLinear, TimeMixer: moving-average kernel of the series decomposition")
    g.add_argument("--individual", action="store_true", help="DLinear: one linear layer per channel")
    g.add_argument("--patch_len", type=int, default=16, help="PatchTST, TTM: points per patch")
    g.add_argument("--stride", type=int, default=8, help="PatchTST: distance between patch starts")
    g.add_argument("--head_dropout", type=float, default=0.0, help="PatchTST, TTM: dropout before the forecast head")
    g.add_argument("--top_k", type=int, default=5, help="TimesNet: number of dominant periods")
    g.add_argument("--num_kernels", type=int, default=6, help="TimesNet: convolutions per inception block")
    g.add_argument("--down_sampling_layers", type=int, default=3, help="TimeMixer: number of coarser scales")
    g.add_argument("--down_sampling_window", type=int, default=2, help="TimeMixer: pooling window between scales")
    g.add_argument("--ap_levels", type=int, default=3, help="TTM: adaptive-patching levels of the backbone")
    g.add_argument("--d_layers", type=int, default=2, help="TTM: decoder mixer layers")
    g.add_argument("--decoder_d_model", type=int, default=None, help="TTM: decoder width (default: d_model)")
    g.add_argument("--decoder_mode", default="mix_channel", choices=["mix_channel", "common_channel"],
                   help="TTM: whether the decoder mixes channels (needed for covariates)")

    g = p.add_argument_group("optimisation")
    g.add_argument("--train_epochs", type=int, default=10, help="maximum epochs (early stopping may end sooner)")
    g.add_argument("--batch_size", type=int, default=32, help="per process: the global batch is batch_size x world")
    g.add_argument("--learning_rate", type=float, default=1e-4, help="single-process learning rate")
    g.add_argument("--lr_scale", default="linear", choices=LR_SCALES,
                   help="scaling of learning_rate with world size: linear (x world), sqrt, none")
    g.add_argument("--warmup_epochs", type=float, default=0.0,
                   help="ramp linearly from learning_rate to the scaled lr over this many epochs (Goyal et al.)")
    g.add_argument("--lradj", default="type1", choices=LRADJ,
                   help="per-epoch schedule on top of the scaled lr: type1 halves (TSLib/DLinear), "
                        "type3 x0.9 (PatchTST), type2 TSLib table, cosine, constant")
    g.add_argument("--weight_decay", type=float, default=0.0, help="Adam weight decay")
    g.add_argument("--patience", type=int, default=3, help="early-stopping patience in epochs")
    g.add_argument("--use_amp", action="store_true",
                   help="mixed precision: bf16 autocast (fp16 + GradScaler on CUDA); slow on CPUs without bf16")
    g.add_argument("--find_unused_parameters", action="store_true",
                   help="DDP: for models whose forward leaves some parameters unused")
    g.add_argument("--accum_steps", type=int, default=1,
                   help="gradient accumulation: one optimizer step per N batches (DDP all-reduces once per step), "
                        "equal to one N-times larger batch")
    g.add_argument("--zero", action="store_true",
                   help="DDP: ZeroRedundancyOptimizer, each rank keeps 1/world of the optimizer state")
    g.add_argument("--compile", action="store_true", help="torch.compile the model (first steps compile)")

    g = p.add_argument_group("outputs and checkpoints")
    g.add_argument("--checkpoints", default="./checkpoints/", help="folder of best checkpoints, one per setting")
    g.add_argument("--results_dir", default="./results", help="metrics, history, TensorBoard, results.csv")
    g.add_argument("--test_dir", default=None,
                   help="with --is_training 0: setting folder under --checkpoints to test (default: this setting)")
    g.add_argument("--test_file_name", default="checkpoint.pth", help="checkpoint file name inside the setting folder")
    g.add_argument("--test_drop_last", action="store_true",
                   help="score only the test windows that fill whole batches of batch_size, as the original "
                        "DLinear/PatchTST code did (off: every window is scored)")
    g.add_argument("--visualize", action="store_true",
                   help="PNG plots of a few test windows and of the loss curves beside metrics.json")
    g.add_argument("--plot_channel", type=int, default=0,
                   help="with --visualize: channel plotted beside the target (negative counts from the end)")

    g = p.add_argument_group("fault tolerance and fine-tuning")
    g.add_argument("--resume", default=None,
                   help="'auto': continue from this setting's last.pth when there is one (use with torchrun "
                        "--max-restarts); or a checkpoint path. Restores model, optimizer, scheduler, AMP scaler, "
                        "early stopping, epoch, step and random states")
    g.add_argument("--adaptation", action="store_true",
                   help="start from pretrained weights (--pretrain_model_path) instead of a random initialisation")
    g.add_argument("--pretrain_model_path", default=None,
                   help="with --adaptation: a checkpoint of this framework or a plain state_dict "
                        "('module.' prefixes accepted)")

    g = p.add_argument_group("distributed")
    g.add_argument("--ddp", action="store_true", help="DistributedDataParallel; launch with torchrun")
    g.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="auto: CUDA when available")
    g.add_argument("--dist_timeout", type=float, default=30.0,
                   help="minutes a collective may wait for a peer before the job fails")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.test_pred_len is None:
        args.test_pred_len = args.output_token_len
    return args


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def validate(args) -> None:
    """Flag checks that need no data; the data checks happen when the data is loaded."""
    try:
        args.model = models.resolve(args.model)
    except KeyError:
        raise ConfigError(f"unknown model {args.model!r}; available: {', '.join(sorted(models.MODELS))}") from None
    caps = models.capabilities(args.model)
    for name in ("seq_len", "input_token_len", "output_token_len", "test_pred_len", "batch_size", "train_epochs",
                 "patience", "d_model", "n_heads", "e_layers", "d_ff", "itr", "moving_avg", "patch_len", "stride",
                 "top_k", "num_kernels", "down_sampling_window", "accum_steps"):
        _require(getattr(args, name) >= 1, f"--{name} must be >= 1, got {getattr(args, name)}")
    for name in ("down_sampling_layers", "ap_levels", "d_layers"):
        _require(getattr(args, name) >= 0, f"--{name} must be >= 0, got {getattr(args, name)}")
    _require(args.decoder_d_model is None or args.decoder_d_model >= 1,
             f"--decoder_d_model must be >= 1, got {args.decoder_d_model}")
    _require(args.learning_rate > 0, f"--learning_rate must be > 0, got {args.learning_rate}")
    for name in ("dropout", "head_dropout"):
        _require(0 <= getattr(args, name) < 1, f"--{name} must be in [0, 1), got {getattr(args, name)}")
    _require(0 < args.subset_rand_ratio <= 1, f"--subset_rand_ratio must be in (0, 1], got {args.subset_rand_ratio}")
    _require(args.warmup_epochs >= 0, f"--warmup_epochs must be >= 0, got {args.warmup_epochs}")
    _require(args.dist_timeout > 0, f"--dist_timeout must be > 0 minutes, got {args.dist_timeout}")

    if args.nonautoregressive:
        _require(caps.direct, f"model {args.model} does not support direct (--nonautoregressive) forecasting")
    else:
        _require(caps.autoregressive, f"model {args.model} is not autoregressive; add --nonautoregressive")
    if caps.token_input or not args.nonautoregressive:
        _require(args.seq_len % args.input_token_len == 0,
                 f"--seq_len {args.seq_len} must be a multiple of --input_token_len {args.input_token_len}")
    if args.covariate:
        _require(caps.covariate, f"model {args.model} is channel-independent: covariates cannot inform the "
                                 "target, so --covariate is not supported")
        _require(not args.univariate, "--covariate needs the channels together; it cannot be used with --univariate")
    _require(not args.last_token or args.covariate, "--last_token only applies with --covariate")
    _require(args.adaptation == (args.pretrain_model_path is not None),
             "--adaptation and --pretrain_model_path go together")
