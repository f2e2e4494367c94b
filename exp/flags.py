"""Command-line flags: the framework's own, plus every model's hyper-parameters from the registry.

Every flag has a role, which decides whether it is part of a run's identity (exp/identity.py):
  tag       free-form names of a configuration (model_id, des): part of its identity
  model     the architecture: the model and its hyper-parameters (must match pretrained weights)
  task      what the model is trained to do: lengths, mode, channel layout (with the model, must match a
            checkpoint that is tested or resumed)
  data      which data it is trained and tested on (the file enters through its name and content fingerprint)
  training  how it is trained (seed, schedule, batch, ...)
  schedule  read by some lr schedules only (pct_start): training, for the runs whose --lradj declares it
  test      how a trained model is tested (horizon, dropped windows): part of a test's name, not the model's
  none      where outputs go and how the run executes (devices, processes, compilation): never the identity
"""
import argparse
import functools
import logging
import sys
import typing

import torch

import models
from data_provider import corpus, datasets
from data_provider.factory import feature_set
from exp import dialects
from utils import cli, metrics, schedules, trackers
from utils.errors import ConfigError
from utils.schedules import LR_SCALES

log = logging.getLogger(__name__)
ROLES = ("tag", "model", "task", "data", "training", "schedule", "test", "none")


class _HelpFormatter(argparse.HelpFormatter):
    """Each default shown once: appended where the help text does not already say it, never for switches."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default is None or action.default is argparse.SUPPRESS \
                or not action.option_strings or action.nargs == 0:
            return text
        return f"{text} (default: {action.default})"


class _Flags:
    """The parser under construction, recording each flag's role as it is added."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.parser, self.roles, self.group = parser, {}, None

    def section(self, title: str) -> None:
        self.group = self.parser.add_argument_group(title)

    def add(self, role: str, name: str, **kwargs) -> None:
        action = self.group.add_argument(name, **kwargs)
        self.roles[action.dest] = role


def _model_flags(flags: _Flags) -> dict:
    """One flag per hyper-parameter any model declares; returns flag -> its default on the command line
    (None where models declare different defaults: each model's own then applies)."""
    declared = {}
    for name, model in models.loadable().items():
        if isinstance(model, models.ModelFileError):
            continue  # reported when a run chooses it
        hints = typing.get_type_hints(model.Config) if getattr(model, "Config", None) else {}
        for f in models.hyperparameter_fields(model):
            declared.setdefault(f.name, {})[name] = (f, hints[f.name])
    flags.section("model (each model's own hyper-parameters; models/<name>.py declares them)")
    defaults = {}
    for flag, by_model in sorted(declared.items()):
        (f, hint), *_ = by_model.values()
        model_defaults = {m: d.default for m, (d, _) in by_model.items()}
        if len(set(map(repr, model_defaults.values()))) == 1:
            defaults[flag], note = f.default, ""
        else:
            defaults[flag] = None
            note = " (default: " + ", ".join(f"{m} {d}" for m, d in model_defaults.items()) + ")"
        kind = typing.get_args(hint)[0] if typing.get_args(hint) else hint  # int | None -> int
        kwargs = {"default": defaults[flag], "help": f"{f.metadata['help']} [{', '.join(by_model)}]{note}"}
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction  # --no-<flag> turns off a default that is on
        else:
            kwargs.update(type=kind, choices=f.metadata["choices"])
        flags.add("model", f"--{flag}", **kwargs)
    return defaults


def build_parser() -> argparse.ArgumentParser:
    p = cli.ArgumentParser(  # one clear line (via run.py's handler) instead of usage + message
        description="Train and evaluate time-series forecasting models on 1 CPU, 1 GPU, or many GPUs/nodes "
                    "(torchrun --nproc_per_node=N run.py --ddp ...).",
        formatter_class=_HelpFormatter)
    f = _Flags(p)

    f.section("experiment")
    f.add("none", "--is_training", type=int, default=1, choices=[0, 1],
          help="1: train, then test the best checkpoint; 0: only test the best checkpoint of this run")
    f.add("model", "--model", default="timer_xl",
          help="model name: the name of its file under models/ (case and -/_ insensitive)")
    f.add("tag", "--model_id", default="run", help="free-form tag that starts the run's name")
    f.add("tag", "--des", default="exp", help="free-form description, part of the run's name")
    f.add("none", "--itr", type=int, default=1, help="repetitions; repetition i uses seed + i")
    f.add("training", "--seed", type=int, default=2021,
          help="random seed: model initialisation (the same on every rank) and training randomness (each rank "
               "its own stream derived from the seed)")

    f.section("data")
    f.add("data", "--data", default="synthetic",
          help="a dataset named in data_provider/datasets/ (README, Data): a benchmark with its standard file and "
               "split (ETTh1, Weather, Solar, PEMS08, ...), a generic format for --data_path (custom: a CSV with a "
               "date column first, .npy, .npz or .txt; PEMS: .npz), synthetic (generated, written if absent) or corpus "
               "(a folder of series files, --root_path: data_provider/corpus.py)")
    f.add("data", "--root_path", default="./dataset/synthetic/", help="folder of the data file")
    f.add("data", "--data_path", default=None,
          help="data file inside root_path (default: the dataset's standard file)")
    f.add("data", "--target", default=None,
          help="target column of a CSV, moved to the last channel (default: the dataset's, OT for the benchmarks)")
    f.add("data", "--date_format", default=None,
          help="format of the CSV's dates: a strftime format as pandas' to_datetime takes it (README, Data), "
               "ISO8601 (ISO dates of varying precision) or mixed (each date parsed on its own, slowly); default: "
               "the format of the first date, inferred")
    f.add("data", "--dayfirst", action="store_true",
          help="the CSV's dates are day first (31/12/2020), where the first date leaves it open (01/02/2020)")
    f.add("data", "--fill_missing", default=None, choices=datasets.FILL_METHODS,
          help="fill missing values (NaN) inside each split after scaling, the count logged: ffill (forward, the "
               "leading gap backward) or interpolate (linear, edges from the nearest value); default: NaN is an "
               "error (PEMS: ffill)")
    f.add("data", "--freq", default=None,
          help="time features of this sampling frequency, TSLib's sets (s, t/min, h, d, b, w, m, q; 15min); "
               "default: from the timestamps, hour-based with minute for sub-hourly data")
    f.add("task", "--univariate", action="store_true",
          help="treat every channel as its own series (channel-independent windows)")
    f.add("task", "--target_only", action="store_true",
          help="read only the target channel (TSLib's --features S)")
    f.add("training", "--subset_rand_ratio", type=float, default=1.0,
          help="train on a seeded random subset of this fraction of the training windows")
    f.add("none", "--corpus_store", default=None,
          help="--data corpus: where the store of the series files in --root_path is (built there when missing); "
               "default: root_path/.tsf_corpus, or root_path itself if it is a store")
    f.add("data", "--corpus_norm", default="series", choices=["series", "window"],
          help="--data corpus: scale each window by its series' training mean and std, or by its own input's")
    f.add("training", "--val_windows", type=int, default=0,
          help="validate during training on a fixed seeded subset of this many validation windows (0: all)")
    f.add("none", "--val_windows_end", type=int, default=0,
          help="with --val_windows: score the best model at the end on this many validation windows, a seeded "
               "subset (0: all), as vali_loss_end in metrics.json")

    f.section("forecasting")
    f.add("task", "--seq_len", type=int, default=672, help="input (lookback) length")
    f.add("task", "--input_token_len", type=int, default=96, help="points per input token (token models)")
    f.add("task", "--output_token_len", type=int, default=96,
          help="points predicted per token (autoregressive) or in one shot (direct)")
    f.add("test", "--test_pred_len", type=int, default=None,
          help="test horizon, rolled out in steps of output_token_len (default: output_token_len)")
    f.add("task", "--nonautoregressive", action="store_true",
          help="direct multi-step training on the output_token_len points after the window")
    f.add("task", "--covariate", action="store_true",
          help="all channels in; loss and metrics on the target (last) channel only")
    f.add("training", "--last_token", action="store_true", help="with --covariate: loss on the last token only")
    f.add("training", "--valid_last", action="store_true",
          help="validate like test: only the forecast after the window (last token)")

    f.section("optimisation")
    f.add("training", "--train_epochs", type=int, default=10,
          help="maximum epochs (early stopping may end sooner)")
    f.add("training", "--train_steps", type=int, default=0,
          help="train for this many optimizer steps instead of epochs, across epoch boundaries (0: by epochs)")
    f.add("training", "--val_every", type=int, default=0,
          help="with --train_steps: validate (a history row, early stopping, the best checkpoint) every this many "
               "steps (0: once, at the end)")
    f.add("none", "--save_every", type=int, default=0,
          help="with --train_steps: also save the resumable checkpoint every this many steps (0: at each "
               "validation); a resumed run continues mid-epoch exactly")
    f.add("training", "--batch_size", type=int, default=32,
          help="per process: the global batch is batch_size x world size")
    f.add("training", "--learning_rate", type=float, default=1e-4, help="single-process learning rate")
    f.add("training", "--lr_scale", default="linear", choices=LR_SCALES,
          help="scaling of learning_rate with world size: linear (x world), sqrt, none")
    f.add("training", "--warmup_epochs", type=float, default=0.0,
          help="ramp linearly from learning_rate to the scaled lr over this many epochs (Goyal et al.)")
    f.add("training", "--lradj", default="type1",
          help="schedule of the scaled lr, a name in utils/schedules/: per epoch type1 (halves: TSLib, DLinear), "
               "type2 (TSLib's table), type3 (x0.9: PatchTST), cosine, constant; per step TST (OneCycle, Adam's "
               "beta1 cycled with it: TSLib's PatchTST/TimeMixer), warmup_cosine")
    f.add("schedule", "--pct_start", type=float, default=0.2,
          help="TST, warmup_cosine: share of the steps before the peak lr (TSLib's flag and default)")
    f.add("training", "--weight_decay", type=float, default=0.0, help="Adam weight decay")
    f.add("training", "--patience", type=int, default=3,
          help="early-stopping patience in epochs (with --train_steps: in validations)")
    f.add("training", "--use_amp", action="store_true",
          help="mixed precision: bf16 autocast (fp16 + GradScaler on CUDA); slow on CPUs without bf16")
    f.add("none", "--find_unused_parameters", action="store_true",
          help="DDP: for models whose forward leaves some parameters unused")
    f.add("training", "--accum_steps", type=int, default=1,
          help="gradient accumulation: one optimizer step per N batches (DDP all-reduces once per step); equal "
               "to one N-times larger batch up to float rounding, except with BatchNorm (PatchTST), which "
               "normalises each batch by its own statistics")
    f.add("none", "--zero", action="store_true",
          help="DDP: ZeroRedundancyOptimizer, each rank keeps 1/world of the optimizer state")
    f.add("none", "--compile", action="store_true", help="torch.compile the model (first steps compile)")

    f.section("outputs and checkpoints")
    f.add("none", "--checkpoints", default="./checkpoints/", help="folder of checkpoints, one folder per run")
    f.add("none", "--results_dir", default="./results", help="metrics, history, TensorBoard, results.csv")
    f.add("none", "--test_dir", default=None,
          help="with --is_training 0: a run folder under --checkpoints to test, with the model it was trained "
               "as (default: this run's own)")
    f.add("none", "--test_file_name", default="checkpoint.pth", help="checkpoint file inside the run folder")
    f.add("test", "--test_windows", type=int, default=0,
          help="test on a fixed seeded subset of this many test windows, named in the test (tp96_w5000); for a "
               "corpus whose test split is too large to score whole (0: all)")
    f.add("test", "--test_drop_last", action="store_true",
          help="score only the test windows that fill whole global batches (batch_size x world size), as the "
               "original DLinear/PatchTST code did (off: every window is scored)")
    f.add("none", "--no_epoch_test", action="store_true",
          help="do not score the test split after every epoch (history's test_loss is then nan): saves that time; "
               "early stopping reads the validation loss and the final test is the same")
    f.add("none", "--visualize", action="store_true",
          help="PNG plots of a few test windows and of the loss curves beside metrics.json")
    f.add("none", "--plot_channel", type=int, default=0,
          help="with --visualize: channel plotted beside the target (negative counts from the end)")
    f.add("none", "--tracker", action="append", default=None,
          help="also log each run (identity, per-epoch rows, test metrics) to an experiment tracker from the main "
               "rank: mlflow (the store MLFLOW_TRACKING_URI names) or wandb (WANDB_MODE=offline without a network); "
               "repeat it or give a comma list for both (--tracker mlflow,wandb); needs pip install -r "
               "requirements-trackers.txt (docs/runs.md)")
    f.add("none", "--tracker_project", default=trackers.DEFAULT_PROJECT,
          help="with --tracker: the MLflow experiment and W&B project the runs are logged to")

    f.section("fault tolerance and fine-tuning")
    f.add("none", "--resume", default=None,
          help="'auto': continue this run from its last.pth when there is one, and re-test it when it has "
               "finished (use with torchrun --max-restarts); or a checkpoint path to continue from. Restores "
               "model, optimizer, scheduler, AMP scaler, early stopping, epoch, step and every rank's random state")
    f.add("none", "--overwrite", action="store_true",
          help="train a run that already exists again from scratch, replacing its checkpoints and results")
    f.add("training", "--adaptation", action="store_true",
          help="start from pretrained weights (--pretrain_model_path) instead of a random initialisation")
    f.add("training", "--pretrain_model_path", default=None,
          help="with --adaptation: a checkpoint of this framework or a plain state_dict to fine-tune from; with "
               "--is_training 0 and no --adaptation: the weights tested zero-shot, without training ('module.' "
               "prefixes accepted)")

    f.section("distributed")
    f.add("none", "--ddp", action="store_true",
          help="DistributedDataParallel; launch with torchrun. N processes of batch B train like one of N x B up "
               "to float rounding (PatchTST's evaluation: about 1e-3) and score every window exactly like it; "
               "dropout draws differ per rank, so runs with dropout are equal in distribution only "
               "(docs/distributed.md)")
    f.add("none", "--device", default="auto", choices=["auto", "cpu", "cuda"], help="auto: CUDA when available")
    f.add("none", "--threads", type=int, default=None,
          help="CPU threads per process for torch's ops (default: OMP_NUM_THREADS if set, else the cores this "
               "process may use shared among the node's ranks, one for small models: utils/threads.py)")
    f.add("none", "--dist_timeout", type=float, default=30.0,
          help="minutes a collective may wait for a peer before the job fails")
    f.add("training", "--fsdp", action="store_true",
          help="with --ddp: shard parameters, gradients and optimizer state across the ranks (PyTorch FSDP2, each "
               "block then the whole model); trains like DDP up to float rounding; with --use_amp parameters are "
               "gathered and used in bf16 (docs/distributed.md)")
    f.add("none", "--cpu_offload", action="store_true",
          help="with --fsdp on CUDA: keep the shards, their gradients and the optimizer step in host memory")
    f.add("none", "--activation_checkpointing", action="store_true",
          help="keep only each block's inputs and recompute its activations in the backward: less memory, about "
               "one more forward of compute, the same numbers")

    p.model_flag_defaults = _model_flags(f)
    p.roles = f.roles
    return p


@functools.cache
def parser() -> argparse.ArgumentParser:
    """The parser, built once per process (it imports every model to learn its flags)."""
    return build_parser()


def parse_args(argv=None) -> argparse.Namespace:
    """The flags as given, TSLib's and OpenLTM's translated (exp/dialects.py); validate() completes them
    (test_pred_len follows output_token_len unless given)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    translation = dialects.translate(argv, {option: action.dest for option, action
                                            in parser()._option_string_actions.items()})
    if translation.dialect is None:
        args = parser().parse_args(argv)
    else:
        dialect_parser = build_parser()
        dialect_parser.set_defaults(**translation.defaults)
        args = dialect_parser.parse_args(translation.argv)
        dialects.complete(args, translation)
    args.dialect, args.dialect_notes = translation.dialect, translation.notes
    args.declared_channels = translation.channels
    return args


def roles() -> dict:
    """flag name -> role, for every flag."""
    return parser().roles


def model_hparams(args) -> dict:
    """The chosen model's hyper-parameters: its declared fields, from the flags (or its own default)."""
    declared = models.hyperparameter_fields(models.model_class(args.model))
    return {f.name: f.default if getattr(args, f.name) is None and f.default is not None else getattr(args, f.name)
            for f in declared}


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _check_hparams(args) -> None:
    """Each hyper-parameter of the chosen model in its declared range; flags set for other models are noted."""
    mine = set()
    for f in models.hyperparameter_fields(models.model_class(args.model)):
        mine.add(f.name)
        value, low, high = model_hparams(args)[f.name], f.metadata["low"], f.metadata["high"]
        if value is None or isinstance(value, bool):
            continue
        if low is not None and high is not None:
            _require(low <= value < high, f"--{f.name} must be in [{low}, {high}), got {value}")
        elif low is not None:
            _require(value >= low, f"--{f.name} must be >= {low}, got {value}")
    dialect_defaults = dialects.DEFAULTS.get(getattr(args, "dialect", None), {})
    ignored = [name for name, default in parser().model_flag_defaults.items()
               if name not in mine and getattr(args, name) != dialect_defaults.get(name, default)]
    if ignored:
        log.info("not used by %s, ignored: %s", args.model, ", ".join(f"--{n}" for n in sorted(ignored)))


def _resolve_data(args, known: dict) -> None:
    """--data as its registry name (a generic name given a benchmark's file becomes the benchmark), --target as
    the dataset's unless given. A corpus is univariate: every channel of its files is a series."""
    if args.data == corpus.NAME:
        _require(args.target is None and not args.target_only and not args.covariate,
                 "--data corpus: every channel is its own series, so --target, --target_only and --covariate do "
                 "not apply")
        _require(args.date_format is None and not args.dayfirst and args.fill_missing is None,
                 "--data corpus drops dates and cuts its series at missing values: --date_format, --dayfirst and "
                 "--fill_missing do not apply")
        _require(not models.capabilities(args.model).time_marks,
                 f"--data corpus has no timestamps, and model {args.model} reads calendar features")
        args.univariate = True
        return
    try:
        entry = datasets.resolve(args.data, args.data_path)
    except KeyError:
        raise ConfigError(f"unknown --data {args.data!r}; available: {', '.join(sorted(known))}") from None
    if args.target is not None and entry.target is None:
        raise ConfigError(f"--target {args.target}: {entry.name} files have no column names; the last column is "
                          "the target")
    args.data = entry.name
    args.target = args.target or entry.target


def validate(args) -> None:
    """Flag checks that need no data; the data checks happen when the data is loaded."""
    for note in getattr(args, "dialect_notes", ()):
        log.info("%s", note)
    if args.test_pred_len is None:
        args.test_pred_len = args.output_token_len
    try:
        args.model = models.resolve(args.model)
    except KeyError:
        raise ConfigError(f"unknown model {args.model!r}; available: {', '.join(models.NAMES)}") from None
    try:
        caps = models.capabilities(args.model)
        metrics.registry()
        known_schedules = schedules.registry()
        known_data = datasets.registry()
    except (models.ModelFileError, metrics.MetricFileError, schedules.ScheduleFileError,
            datasets.DatasetFileError) as e:
        raise ConfigError(str(e)) from None
    _resolve_data(args, known_data)
    _require(args.lradj in known_schedules,
             f"unknown --lradj {args.lradj!r}; available: {', '.join(sorted(known_schedules))}")
    for name in ("seq_len", "input_token_len", "output_token_len", "test_pred_len", "batch_size", "train_epochs",
                 "patience", "itr", "accum_steps"):
        _require(getattr(args, name) >= 1, f"--{name} must be >= 1, got {getattr(args, name)}")
    _check_hparams(args)
    _require(args.learning_rate > 0, f"--learning_rate must be > 0, got {args.learning_rate}")
    _require(0 < args.subset_rand_ratio <= 1, f"--subset_rand_ratio must be in (0, 1], got {args.subset_rand_ratio}")
    for name in ("val_windows", "val_windows_end", "test_windows", "train_steps", "val_every", "save_every"):
        _require(getattr(args, name) >= 0, f"--{name} must be >= 0, got {getattr(args, name)}")
    _require(args.train_steps or not (args.val_every or args.save_every),
             "--val_every and --save_every count steps of a --train_steps run")
    _require(args.warmup_epochs >= 0, f"--warmup_epochs must be >= 0, got {args.warmup_epochs}")
    _require(0 < args.pct_start < 1, f"--pct_start must be in (0, 1), got {args.pct_start}")
    _require(args.dist_timeout > 0, f"--dist_timeout must be > 0 minutes, got {args.dist_timeout}")
    _require(args.threads is None or args.threads >= 1, f"--threads must be >= 1, got {args.threads}")
    trackers.check(args)

    if args.nonautoregressive:
        _require(caps.direct, f"model {args.model} does not support direct (--nonautoregressive) forecasting")
    else:
        _require(caps.autoregressive, f"model {args.model} is not autoregressive; add --nonautoregressive")
    if uses_input_tokens(args):
        _require(args.seq_len % args.input_token_len == 0,
                 f"--seq_len {args.seq_len} must be a multiple of --input_token_len {args.input_token_len}")
    if args.freq is not None:
        feature_set(args.freq)
    _require(args.date_format is None or "%" in args.date_format or args.date_format in ("ISO8601", "mixed"),
             f"--date_format {args.date_format!r} is not a date format: give a strftime format (%d.%m.%Y %H:%M), "
             "ISO8601 or mixed")
    _require(not args.dayfirst or args.date_format in (None, "mixed"),
             f"--date_format {args.date_format} fixes where the day is: drop --dayfirst")
    _require(not (args.target_only and (args.covariate or args.univariate)),
             "--target_only reads one channel: --covariate and --univariate do not apply")
    if args.covariate:
        _require(caps.covariate, f"model {args.model} is channel-independent: covariates cannot inform the "
                                 "target, so --covariate is not supported")
        _require(not args.univariate, "--covariate needs the channels together; it cannot be used with --univariate")
        _require(not caps.exogenous or args.test_pred_len <= args.output_token_len,
                 f"model {args.model} forecasts the target alone with --covariate, so it cannot roll its forecast "
                 f"out to --test_pred_len {args.test_pred_len} > --output_token_len {args.output_token_len}")
    _require(not args.last_token or args.covariate, "--last_token only applies with --covariate")
    _require(not args.adaptation or args.pretrain_model_path is not None,
             "--adaptation starts from pretrained weights: name them with --pretrain_model_path")
    _require(args.adaptation or args.pretrain_model_path is None or not args.is_training,
             "--pretrain_model_path: add --adaptation to fine-tune from it, or --is_training 0 to test it zero-shot")
    _require(not zero_shot(args) or args.test_dir is None, "a zero-shot test (--pretrain_model_path with "
             "--is_training 0) tests those weights, not a run of --test_dir")
    _require(not (args.overwrite and args.resume == "auto"),
             "--overwrite trains again from scratch; --resume auto continues: choose one")
    _require(not (args.overwrite and not args.is_training), "--overwrite only applies to training (--is_training 1)")
    _require(args.test_dir is None or not args.is_training, "--test_dir only applies with --is_training 0")
    _require(args.test_dir is None or args.itr == 1, "--test_dir tests one checkpoint: --itr must be 1")
    _require(not args.cpu_offload or args.fsdp, "--cpu_offload moves the shards of --fsdp to host memory: add --fsdp")
    _require(not args.cpu_offload or (args.device != "cpu" and torch.cuda.is_available()),
             "--cpu_offload keeps FSDP's shards in host memory while a GPU computes: a CPU run holds everything "
             "there already")
    _require(not (args.fsdp and args.zero), "--fsdp shards the optimizer state already: drop --zero")
    _require(not (args.fsdp and args.compile), "--fsdp with --compile is not supported: drop one of them")
    _require(not (args.fsdp and args.find_unused_parameters),
             "--fsdp needs every rank to use every parameter in each step: drop --find_unused_parameters "
             "(a model that leaves parameters unused trains with plain --ddp)")
    _require(not args.fsdp or args.ddp, "--fsdp shards the model across the ranks of a torchrun job: add --ddp")


def reference_markdown() -> str:
    """docs/flags.md: every flag by section with its default and help (a test keeps the file equal to this)."""
    lines = ["# Flags", "", "Generated from the parser: `python -m exp.flags > docs/flags.md`. `python run.py --help` "
             "prints the same, and also every model's own hyper-parameters (the fields of `Config` in "
             "`models/<name>.py`) with the models that use them: they are left out here, so that adding a model "
             "changes nothing in this file.", ""]
    for group in parser()._action_groups:
        if group.title in ("positional arguments", "options") or group.title.startswith("model ") \
                or not group._group_actions:
            continue
        lines += [f"## {group.title}", "", "| flag | default | meaning |", "|---|---|---|"]
        for action in group._group_actions:
            default = "off" if action.nargs == 0 else "—" if action.default is None else f"`{action.default}`"
            meaning = (action.help or "").replace("|", "\\|")
            if action.choices is not None:
                meaning += " (one of " + ", ".join(f"`{c}`" for c in action.choices) + ")"
            lines.append(f"| `{action.option_strings[0]}` | {default} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


def zero_shot(args) -> bool:
    """Pretrained weights tested as they are, on data they were not trained on."""
    return not args.is_training and not args.adaptation and args.pretrain_model_path is not None


def uses_input_tokens(args) -> bool:
    """Whether input_token_len matters: token models always, and every autoregressive run."""
    return models.capabilities(args.model).token_input or not args.nonautoregressive


if __name__ == "__main__":
    sys.stdout.write(reference_markdown())  # the generated file itself, not a log line
