"""Command-line flags: the framework's own, plus every model's hyper-parameters from the registry.

Every flag is declared with its section of the run's configuration (exp/config.py), which is the role it plays in
the run's identity (exp/identity.py):
  tag         free-form names of a configuration (model_id, des): part of its identity
  data        which data it is trained and tested on (the file enters through its name and content fingerprint)
  task        what the model is trained to do: lengths, mode, channel layout (with the model, must match a
              checkpoint that is tested or resumed)
  model       the architecture: the model and its hyper-parameters (must match pretrained weights)
  training    how it is trained (seed, schedule, batch, ...); a flag that lr schedules declare they read (pct_start)
              only for the runs whose --lradj reads it
  evaluation  how a trained model is tested (horizon, dropped windows): part of a test's name, not the model's
  runtime     where outputs go and how the run executes (devices, processes, compilation): never the identity
A flag declared `later=True` came after runs were recorded: at its default it stays out of the identity, so those
runs keep theirs (exp/identity.added_later).
"""
import argparse
import functools
import sys
import typing

import models
from data_provider import datasets
from exp.parallel import AMP_DTYPES
from utils import cli, losses, metrics, trackers
from utils.schedules import LR_SCALES

SECTIONS = ("tag", "data", "task", "model", "training", "evaluation", "runtime")
TASK_NAMES = ("long_term", "short_term")


class _HelpFormatter(argparse.HelpFormatter):
    """Each default shown once: appended where the help text does not already say it, never for switches."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.default is None or action.default is argparse.SUPPRESS \
                or not action.option_strings or action.nargs == 0:
            return text
        return f"{text} (default: {action.default})"


class _Flags:
    """The parser under construction, recording each flag's section as it is added, and the flags added later."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.parser, self.roles, self.later, self.group = parser, {}, {}, None

    def heading(self, title: str) -> None:
        self.group = self.parser.add_argument_group(title)

    def add(self, section: str, name: str, later: bool = False, **kwargs) -> None:
        action = self.group.add_argument(name, **kwargs)
        self.roles[action.dest] = section
        if later:
            self.later[action.dest] = action.default


def _levels(text: str) -> tuple:
    try:
        return tuple(float(level) for level in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


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
    flags.heading("model (each model's own hyper-parameters; models/<name>.py declares them)")
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


def _experiment_flags(f: _Flags) -> None:
    f.heading("experiment")
    f.add("runtime", "--is_training", type=int, default=1, choices=[0, 1],
          help="1: train, then test the best checkpoint; 0: only test the best checkpoint of this run")
    f.add("model", "--model", default="timer_xl",
          help="model name: the name of its file under models/ (case and -/_ insensitive)")
    f.add("tag", "--model_id", default="run", help="free-form tag that starts the run's name")
    f.add("tag", "--des", default="exp", help="free-form description, part of the run's name")
    f.add("runtime", "--itr", type=int, default=1, help="repetitions; repetition i uses seed + i")
    f.add("training", "--seed", type=int, default=2021,
          help="random seed: model initialisation (the same on every rank) and training randomness (each rank "
               "its own stream derived from the seed)")


def _data_flags(f: _Flags) -> None:
    f.heading("data")
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
    f.add("data", "--date_format", later=True, default=None,
          help="format of the CSV's dates: a strftime format as pandas' to_datetime takes it (README, Data), "
               "ISO8601 (ISO dates of varying precision) or mixed (each date parsed on its own, slowly); default: "
               "the format of the first date, inferred")
    f.add("data", "--dayfirst", later=True, action="store_true",
          help="the CSV's dates are day first (31/12/2020), where the first date leaves it open (01/02/2020)")
    f.add("data", "--fill_missing", later=True, default=None, choices=datasets.FILL_METHODS,
          help="fill missing values (NaN) inside each split after scaling, the count logged: ffill (forward, the "
               "leading gap backward) or interpolate (linear, edges from the nearest value); default: NaN is an "
               "error (PEMS: ffill)")
    f.add("task", "--protocol", later=True, default="tslib",
          help="evaluation protocol, one of data_provider/protocols/: tslib (each dataset's own split, as TSLib and "
               "the long-term papers) or tfb (TFB's: the whole file but ETT's first 20 months, 6:2:2 for ETT, PEMS and "
               "Solar, 7:1:2 otherwise, every test window scored); docs/protocols.md")
    f.add("data", "--freq", default=None,
          help="time features of this sampling frequency, TSLib's sets (s, t/min, h, d, b, w, m, q; 15min); "
               "default: from the timestamps, hour-based with minute for sub-hourly data")
    f.add("data", "--seasonal_patterns", later=True, default=None,
          help="--data m4: the subset (Yearly, Quarterly, Monthly, Weekly, Daily, Hourly), read from "
               "<subset>-train.csv and <subset>-test.csv under --root_path (TSLib's flag)")
    f.add("task", "--univariate", action="store_true",
          help="treat every channel as its own series (channel-independent windows)")
    f.add("task", "--target_only", action="store_true",
          help="read only the target channel (TSLib's --features S)")
    f.add("training", "--subset_rand_ratio", type=float, default=1.0,
          help="train on a seeded random subset of this fraction of the training windows")
    f.add("runtime", "--corpus_store", default=None,
          help="--data corpus: where the store of the series files in --root_path is (built there when missing); "
               "default: root_path/.tsf_corpus, or root_path itself if it is a store")
    f.add("data", "--corpus_norm", default="series", choices=["series", "window"],
          help="--data corpus: scale each window by its series' training mean and std, or by its own input's")
    f.add("training", "--val_windows", later=True, type=int, default=0,
          help="validate during training on a fixed seeded subset of this many validation windows (0: all)")
    f.add("runtime", "--val_windows_end", type=int, default=0,
          help="with --val_windows: score the best model at the end on this many validation windows, a seeded "
               "subset (0: all), as vali_loss_end in metrics.json")


def _forecasting_flags(f: _Flags) -> None:
    f.heading("forecasting")
    f.add("task", "--task", later=True, default="long_term", choices=TASK_NAMES,
          help="long_term: windows cut from one table's train/val/test rows; short_term: the M4 protocol (--data m4, "
               "one model over every series of a subset, its horizon, lookback and window sampling: "
               "docs/short_term.md); TSLib's --task_name short_term_forecast")
    f.add("task", "--lookback_multiple", later=True, type=float, default=None,
          help="short_term: the lookback (--seq_len) is this multiple of the subset's horizon (default: TSLib's 2)")
    f.add("task", "--history_multiple", later=True, type=float, default=None,
          help="short_term: training windows end within the last this multiple of the horizon of each series "
               "(N-BEATS's L_H; default: its 1.5 for Yearly, Quarterly, Monthly, 10 for Weekly, Daily, Hourly)")
    f.add("task", "--seq_len", type=int, default=672, help="input (lookback) length")
    f.add("task", "--input_token_len", type=int, default=96, help="points per input token (token models)")
    f.add("task", "--output_token_len", type=int, default=96,
          help="points predicted per token (autoregressive) or in one shot (direct)")
    f.add("evaluation", "--test_pred_len", type=int, default=None,
          help="test horizon, rolled out in steps of output_token_len (default: output_token_len)")
    f.add("task", "--nonautoregressive", action="store_true",
          help="direct multi-step training on the output_token_len points after the window")
    f.add("task", "--covariate", action="store_true",
          help="all channels in; loss and metrics on the target (last) channel only")
    f.add("training", "--last_token", action="store_true", help="with --covariate: loss on the last token only")
    f.add("training", "--valid_last", action="store_true",
          help="validate like test: only the forecast after the window (last token)")


def _optimisation_flags(f: _Flags) -> None:
    f.heading("optimisation")
    f.add("training", "--train_epochs", type=int, default=10,
          help="maximum epochs (early stopping may end sooner)")
    f.add("training", "--train_steps", later=True, type=int, default=0,
          help="train for this many optimizer steps instead of epochs, across epoch boundaries (0: by epochs)")
    f.add("training", "--val_every", later=True, type=int, default=0,
          help="with --train_steps: validate (a history row, early stopping, the best checkpoint) every this many "
               "steps (0: once, at the end)")
    f.add("runtime", "--save_every", type=int, default=0,
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
    f.add("training", "--pct_start", type=float, default=0.2,
          help="TST, warmup_cosine: share of the steps before the peak lr (TSLib's flag and default)")
    f.add("training", "--weight_decay", type=float, default=0.0, help="Adam weight decay")
    f.add("training", "--loss", later=True, default="mse", choices=sorted(losses.registry()),
          help="what training minimises and validation (early stopping, the best checkpoint) reports: a name in "
               "utils/losses/ (quantile, gaussian, student_t, mixture: probabilistic forecasts)")
    f.add("training", "--quantiles", later=True, type=_levels, default=metrics.GRID,
          help="quantile levels, comma-separated in (0, 1): what --loss quantile forecasts, and the grid of the "
               "crps metric (default: 0.1,0.2,...,0.9)")
    f.add("training", "--patience", type=int, default=3,
          help="early-stopping patience in epochs (with --train_steps: in validations)")
    f.add("training", "--use_amp", action="store_true",
          help="mixed precision: bf16 autocast (fp16 + GradScaler on CUDA); slow on CPUs without bf16")
    f.add("training", "--amp_dtype", later=True, default=None, choices=AMP_DTYPES,
          help="with --use_amp: autocast to fp16 (its gradients scaled by a GradScaler) or bf16 (fp32's range, no "
               "scaling) instead of the device's default (fp16 on CUDA, bf16 on CPU and under --fsdp)")
    f.add("runtime", "--find_unused_parameters", action="store_true",
          help="DDP: for models whose forward leaves some parameters unused")
    f.add("training", "--accum_steps", type=int, default=1,
          help="gradient accumulation: one optimizer step per N batches (DDP all-reduces once per step); equal "
               "to one N-times larger batch up to float rounding, except with BatchNorm (PatchTST), which "
               "normalises each batch by its own statistics")
    f.add("runtime", "--zero", action="store_true",
          help="DDP: ZeroRedundancyOptimizer, each rank keeps 1/world of the optimizer state")
    f.add("runtime", "--compile", action="store_true", help="torch.compile the model (first steps compile)")


def _output_flags(f: _Flags) -> None:
    f.heading("outputs and checkpoints")
    f.add("runtime", "--checkpoints", default="./checkpoints/", help="folder of checkpoints, one folder per run")
    f.add("runtime", "--results_dir", default="./results", help="metrics, history, TensorBoard, results.csv")
    f.add("runtime", "--test_dir", default=None,
          help="with --is_training 0: a run folder under --checkpoints to test, with the model it was trained "
               "as (default: this run's own)")
    f.add("runtime", "--test_file_name", default="checkpoint.pth", help="checkpoint file inside the run folder")
    f.add("evaluation", "--test_windows", type=int, default=0,
          help="test on a fixed seeded subset of this many test windows, named in the test (tp96_w5000); for a "
               "corpus whose test split is too large to score whole (0: all)")
    f.add("evaluation", "--num_samples", type=int, default=None,
          help="test a distribution loss's forecast as this many sample paths per window (drawn ancestrally "
               "through a rolled-out horizon, seeded per window by --seed: the same under any number of ranks); "
               "every metric reads the samples, crps_sample their CRPS (default: none, the exact distribution)")
    f.add("evaluation", "--test_drop_last", action="store_true",
          help="score only the test windows that fill whole global batches (batch_size x world size), as the "
               "original DLinear/PatchTST code did (off: every window is scored)")
    f.add("runtime", "--no_epoch_test", action="store_true",
          help="do not score the test split after every epoch (history's test_loss is then nan): saves that time; "
               "early stopping reads the validation loss and the final test is the same")
    f.add("runtime", "--visualize", action="store_true",
          help="PNG plots of a few test windows and of the loss curves beside metrics.json")
    f.add("runtime", "--plot_channel", type=int, default=0,
          help="with --visualize: channel plotted beside the target (negative counts from the end)")
    f.add("runtime", "--tracker", action="append", default=None,
          help="also log each run (identity, per-epoch rows, test metrics) to an experiment tracker from the main "
               "rank: mlflow (the store MLFLOW_TRACKING_URI names) or wandb (WANDB_MODE=offline without a network); "
               "repeat it or give a comma list for both (--tracker mlflow,wandb); needs pip install -r "
               "requirements-trackers.txt (docs/runs.md)")
    f.add("runtime", "--tracker_project", default=trackers.DEFAULT_PROJECT,
          help="with --tracker: the MLflow experiment and W&B project the runs are logged to")


def _fault_tolerance_flags(f: _Flags) -> None:
    f.heading("fault tolerance and fine-tuning")
    f.add("runtime", "--resume", default=None,
          help="'auto': continue this run from its last.pth when there is one, and re-test it when it has "
               "finished (use with torchrun --max-restarts); or a checkpoint path to continue from. Restores "
               "model, optimizer, scheduler, AMP scaler, early stopping, epoch, step and every rank's random state")
    f.add("runtime", "--overwrite", action="store_true",
          help="train a run that already exists again from scratch, replacing its checkpoints and results")
    f.add("training", "--adaptation", action="store_true",
          help="start from pretrained weights (--pretrain_model_path) instead of a random initialisation")
    f.add("training", "--pretrain_model_path", default=None,
          help="with --adaptation: a checkpoint of this framework or a plain state_dict to fine-tune from; with "
               "--is_training 0 and no --adaptation: the weights tested zero-shot, without training ('module.' "
               "prefixes accepted)")
    f.add("training", "--pretrained", later=True, default=None,
          help="a published checkpoint in its publisher's format (the folder `huggingface-cli download` made, or "
               "a file) of a model that reads it (docs/foundation.md): its architecture comes from the checkpoint; "
               "--is_training 0 tests it zero-shot, --is_training 1 fine-tunes it; never touches the network")
    f.add("training", "--finetune", later=True, default="full", choices=["full", "head", "lora"],
          help="what fine-tuning pretrained weights (--pretrained, or --adaptation) trains: every parameter, the "
               "model's output head alone, or LoRA adapters on every linear layer of the rest (peft; the weights "
               "themselves frozen)")
    f.add("training", "--lora_rank", later=True, type=int, default=8, help="with --finetune lora: the adapters' rank")
    f.add("training", "--lora_alpha", later=True, type=float, default=16.0,
          help="with --finetune lora: the adapters' scale numerator (their update is lora_alpha / lora_rank x B A)")


def _distributed_flags(f: _Flags) -> None:
    f.heading("distributed")
    f.add("runtime", "--ddp", action="store_true",
          help="DistributedDataParallel; launch with torchrun. N processes of batch B train like one of N x B up "
               "to float rounding (PatchTST's evaluation: about 1e-3) and score every window exactly like it; "
               "dropout draws differ per rank, so runs with dropout are equal in distribution only "
               "(docs/distributed.md)")
    f.add("runtime", "--device", default="auto", choices=["auto", "cpu", "cuda"], help="auto: CUDA when available")
    f.add("runtime", "--threads", type=int, default=None,
          help="CPU threads per process for torch's ops (default: OMP_NUM_THREADS if set, else the cores this "
               "process may use shared among the node's ranks, one for small models: utils/threads.py)")
    f.add("runtime", "--dist_timeout", type=float, default=30.0,
          help="minutes a collective may wait for a peer before the job fails")
    f.add("training", "--fsdp", later=True, action="store_true",
          help="with --ddp: shard parameters, gradients and optimizer state across the ranks (PyTorch FSDP2, each "
               "block then the whole model); trains like DDP up to float rounding; with --use_amp parameters are "
               "gathered and used in bf16 (docs/distributed.md)")
    f.add("runtime", "--cpu_offload", action="store_true",
          help="with --fsdp on CUDA: keep the shards, their gradients and the optimizer step in host memory")
    f.add("runtime", "--activation_checkpointing", action="store_true",
          help="keep only each block's inputs and recompute its activations in the backward: less memory, about "
               "one more forward of compute, the same numbers")


def build_parser() -> argparse.ArgumentParser:
    p = cli.ArgumentParser(  # one clear line (via run.py's handler) instead of usage + message
        description="Train and evaluate time-series forecasting models on 1 CPU, 1 GPU, or many GPUs/nodes "
                    "(torchrun --nproc_per_node=N run.py --ddp ...).",
        formatter_class=_HelpFormatter)
    f = _Flags(p)
    for declare in (_experiment_flags, _data_flags, _forecasting_flags, _optimisation_flags, _output_flags,
                    _fault_tolerance_flags, _distributed_flags):
        declare(f)
    p.model_flag_defaults = _model_flags(f)
    p.roles, p.later = f.roles, f.later
    return p


@functools.cache
def parser() -> argparse.ArgumentParser:
    """The parser, built once per process (it imports every model to learn its flags)."""
    return build_parser()


def roles() -> dict:
    """flag name -> its section (its role in the run's identity), for every flag."""
    return parser().roles


def later_flags() -> dict:
    """flag name -> its default, for the flags declared later=True."""
    return parser().later


def model_hparams(args) -> dict:
    """The chosen model's hyper-parameters: its declared fields, from the flags (or its own default)."""
    declared = models.hyperparameter_fields(models.model_class(args.model))
    return {f.name: f.default if getattr(args, f.name) is None and f.default is not None else getattr(args, f.name)
            for f in declared}


def hyperparameter_flags(values: dict) -> list:
    """run.py flags setting a model's hyper-parameters to `values` (a boolean as --name / --no-name; None: left out,
    the model's own default)."""
    flags = []
    for key, value in values.items():
        if isinstance(value, bool):
            flags.append(f"--{key}" if value else f"--no-{key}")
        elif value is not None:
            flags += [f"--{key}", str(value)]
    return flags


def reference_markdown() -> str:
    """docs/flags.md: every flag by heading with its section, default and help (a test keeps the file equal to this)."""
    lines = ["# Flags", "", "Generated from the parser: `python -m exp.flags > docs/flags.md`. `python run.py --help` "
             "prints the same, and also every model's own hyper-parameters (the fields of `Config` in "
             "`models/<name>.py`) with the models that use them: they are left out here, so that adding a model "
             "changes nothing in this file.", "",
             "A flag's section is its part of the run's configuration and its role in the run's identity "
             "([runs.md](runs.md)): `tag`, `data`, `task`, `model` and `training` flags are the identity (`data` through "
             "the file's name and content, a `training` flag that schedules read only for a `--lradj` that reads it), "
             "`evaluation` flags name the test, `runtime` flags are never part of it. One added after runs were "
             "recorded enters only off its default, so that those runs keep their identity.", ""]
    for group in parser()._action_groups:
        if group.title in ("positional arguments", "options") or group.title.startswith("model ") \
                or not group._group_actions:
            continue
        lines += [f"## {group.title}", "", "| flag | section | default | meaning |", "|---|---|---|---|"]
        for action in group._group_actions:
            section = roles()[action.dest] + (", off its default" if action.dest in later_flags() else "")
            default = "off" if action.nargs == 0 else "—" if action.default is None else f"`{action.default}`"
            meaning = (action.help or "").replace("|", "\\|")
            if action.choices is not None:
                meaning += " (one of " + ", ".join(f"`{c}`" for c in action.choices) + ")"
            lines.append(f"| `{action.option_strings[0]}` | {section} | {default} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


def zero_shot(args) -> bool:
    """Pretrained weights tested as they are, on data they were not trained on (with --test_dir, --pretrained names
    the published weights that run was fine-tuned from instead)."""
    return not args.is_training and not args.adaptation and (
        args.pretrain_model_path is not None or (args.pretrained is not None and args.test_dir is None))


def uses_input_tokens(args) -> bool:
    """Whether input_token_len matters: token models always, and every autoregressive run."""
    return models.capabilities(args.model).token_input or not args.nonautoregressive


if __name__ == "__main__":
    sys.stdout.write(reference_markdown())  # the generated file itself, not a log line
