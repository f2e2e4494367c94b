"""A run's configuration: every flag resolved once from the command line, checked, then frozen.

    draft = parse_args(argv)   # the command line as given, TSLib's and OpenLTM's flags translated: a mutable draft
    config = resolve(draft)    # --test_dir's recorded flags adopted, the rest completed, all checked: frozen

The configuration has one section per role a flag plays in the run's identity (exp/flags.py): tag, data, task, model,
training, evaluation, runtime. `config.batch_size` reads a flag wherever it is, `config.sections.training.batch_size`
from its section, `config.as_dict()` gives all of them by name; assigning to any of them raises. What resolution
found besides the flags is `config.origin`: the dialect, its notes, the channels a script declared, and the identity
adopted from --test_dir's checkpoint.
"""
import argparse
import copy
import dataclasses
import functools
import logging
import sys
import typing
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import torch

import models
from data_provider import corpus, datasets, m4, protocols
from data_provider.factory import feature_set
from exp import dialects
from exp.flags import SECTIONS, build_parser, model_hparams, parser, roles, uses_input_tokens, zero_shot
from exp.identity import RunIdentity, adopt_checkpoint
from exp.pretrained import resolve_published
from models.layers.published import levels as quantile_levels
from utils import losses, metrics, schedules, trackers
from utils.errors import ConfigError

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Origin:
    """What resolution found besides the flags."""
    dialect: str | None  # TSLib or OpenLTM: the command line was written in its flags
    notes: tuple  # that dialect's flags accepted without effect, explained (logged when resolved)
    declared_channels: Mapping  # --enc_in, --c_out, --n_vars, ...: checked against the data once it is read
    adopted: RunIdentity | None = None  # --test_dir: the identity its checkpoint records, whose flags were adopted


@dataclasses.dataclass(frozen=True)
class Sections:
    """The flags by section (exp/flags.py: SECTIONS), each section a frozen dataclass of its flags."""
    tag: Any
    data: Any
    task: Any
    model: Any
    training: Any
    evaluation: Any
    runtime: Any


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A run's configuration, frozen: made by resolve(), read by everything after it."""
    sections: Sections
    origin: Origin

    def __post_init__(self):
        # flat reads, as the rest of the code reads flags (config.batch_size): plain attributes, as fast as a
        # Namespace's, set here once (a frozen dataclass refuses any later assignment)
        for section in dataclasses.fields(self.sections):
            for name, value in vars(getattr(self.sections, section.name)).items():
                object.__setattr__(self, name, value)

    def as_dict(self) -> dict:
        """Every flag by name, as plain values (what a checkpoint records of its run)."""
        return {name: getattr(self, name) for name in roles()}


@functools.cache
def section_types() -> dict:
    """section -> the frozen dataclass of its flags, each typed as the parser declares it."""
    fields = {section: [] for section in SECTIONS}
    for action in parser()._actions:
        if action.dest in roles():
            fields[roles()[action.dest]].append((action.dest, _flag_type(action)))
    return {section: dataclasses.make_dataclass(f"{section.title()}Flags", flags, frozen=True)
            for section, flags in fields.items()}


def _flag_type(action: argparse.Action) -> type:
    kind = bool if action.nargs == 0 else tuple if isinstance(action, argparse._AppendAction) else action.type or str
    if not isinstance(kind, type):  # a parsing function (--quantiles): the type it returns
        kind = typing.get_type_hints(kind)["return"]
    return kind | None if action.default is None else kind


def parse_args(argv=None) -> argparse.Namespace:
    """The command line as given, TSLib's and OpenLTM's flags translated (exp/dialects.py): the draft that resolve()
    turns into the run's configuration. Its `origin` holds what the translation found besides flags."""
    argv = sys.argv[1:] if argv is None else list(argv)
    translation = dialects.translate(argv, {option: action.dest for option, action
                                            in parser()._option_string_actions.items()})
    if translation.dialect is None:
        draft = parser().parse_args(argv)
    else:
        dialect_parser = build_parser()
        dialect_parser.set_defaults(**translation.defaults)
        draft = dialect_parser.parse_args(translation.argv)
        dialects.complete(draft, translation)
    draft.origin = Origin(translation.dialect, tuple(translation.notes), MappingProxyType(translation.channels))
    return draft


def resolve(draft: argparse.Namespace) -> RunConfig:
    """The run's configuration from a parsed command line, in this order: --test_dir's recorded flags replace the
    command line's, the flags that follow from others are completed, everything is checked, and the result is frozen.
    Works on a copy (the draft stays as given). It reads --test_dir's checkpoint: under DDP, every rank calls it
    inside peers.startup, so that one that fails stops the others."""
    draft = copy.copy(draft)
    for note in draft.origin.notes:
        log.info("%s", note)
    adopted = adopt_checkpoint(draft) if draft.test_dir else None
    _complete(draft)
    _check_run_kind(draft)
    resolve_published(draft, functools.partial(_default_of, draft.model))
    _check_lengths_and_ranges(draft)
    _check_mode(draft)
    _check_data_flags(draft)
    _check_covariates(draft)
    _check_loss(draft)
    _check_distribution(draft)
    return _freeze(draft, dataclasses.replace(draft.origin, adopted=adopted))


def _freeze(draft: argparse.Namespace, origin: Origin) -> RunConfig:
    values = {section: {} for section in SECTIONS}
    for name, section in roles().items():
        value = getattr(draft, name)
        values[section][name] = tuple(value) if isinstance(value, list) else value  # --tracker: a list when parsed
    return RunConfig(Sections(**{section: section_types()[section](**flags) for section, flags in values.items()}),
                     origin)


def _default_of(model: str, name: str):
    """The value a flag has when it is not given: a hyper-parameter's the model's own default."""
    own = {f.name: f.default for f in models.hyperparameter_fields(models.model_class(model))}
    return own[name] if name in own else parser().get_default(name)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


# ---- completion: the flags that follow from others -------------------------------------------------------
def _complete(draft) -> None:
    """The test horizon (output_token_len unless given), the model's registry name, the data's (and its target and
    a corpus's channel layout), the trackers as a list of names; the registries they name, loaded."""
    try:
        draft.model = models.resolve(draft.model)
    except KeyError:
        raise ConfigError(f"unknown model {draft.model!r}; available: {', '.join(models.NAMES)}") from None
    try:
        models.capabilities(draft.model)
        metrics.registry()
        schedules.registry()
        known_data = datasets.registry()
    except (models.ModelFileError, metrics.MetricFileError, schedules.ScheduleFileError,
            datasets.DatasetFileError) as e:
        raise ConfigError(str(e)) from None
    _resolve_data(draft, known_data)
    if draft.task == "short_term":
        _complete_short_term(draft)
    if draft.test_pred_len is None:
        draft.test_pred_len = draft.output_token_len
    draft.tracker = trackers.check(draft)


def _resolve_data(draft, known: dict) -> None:
    """--data as its registry name (a generic name given a benchmark's file becomes the benchmark), --target as
    the dataset's unless given. A corpus is univariate: every channel of its files is a series."""
    _require((draft.data == m4.NAME) == (draft.task == "short_term"),
             "--data m4 is the short-term task's: add --task short_term (TSLib: --task_name short_term_forecast)"
             if draft.data == m4.NAME else f"--task short_term forecasts the M4 competition's series: --data m4 "
             f"--seasonal_patterns <subset> (not --data {draft.data})")
    if draft.data == m4.NAME:
        return
    given = [f"--{name}" for name in ("seasonal_patterns", "lookback_multiple", "history_multiple")
             if getattr(draft, name) is not None]
    _require(not given, f"{', '.join(given)}: the short-term task's (--task short_term --data m4)")
    if draft.data == corpus.NAME:
        _require(draft.target is None and not draft.target_only and not draft.covariate,
                 "--data corpus: every channel is its own series, so --target, --target_only and --covariate do "
                 "not apply")
        _require(draft.date_format is None and not draft.dayfirst and draft.fill_missing is None,
                 "--data corpus drops dates and cuts its series at missing values: --date_format, --dayfirst and "
                 "--fill_missing do not apply")
        _require(not models.capabilities(draft.model).time_marks,
                 f"--data corpus has no timestamps, and model {draft.model} reads calendar features")
        draft.univariate = True
        return
    try:
        entry = datasets.resolve(draft.data, draft.data_path)
    except KeyError:
        raise ConfigError(f"unknown --data {draft.data!r}; available: {', '.join(sorted(known))}") from None
    if draft.target is not None and entry.target is None:
        raise ConfigError(f"--target {draft.target}: {entry.name} files have no column names; the last column is "
                          "the target")
    draft.data = entry.name
    draft.target = draft.target or entry.target


def _complete_short_term(draft) -> None:
    """The M4 protocol's lengths from the subset (TSLib's exp_short_term_forecasting sets them alike): the horizon,
    a lookback of --lookback_multiple horizons, N-BEATS's history multiple; direct forecasts of every series on its
    own; the test set scored once, at the end."""
    _require(draft.seasonal_patterns in m4.SUBSETS,
             f"--seasonal_patterns {draft.seasonal_patterns}: the M4 subsets are {', '.join(m4.SUBSETS)}"
             if draft.seasonal_patterns else "--data m4: name the subset with --seasonal_patterns "
             f"({', '.join(m4.SUBSETS)})")
    _require(not draft.covariate, "--covariate (TSLib's --features MS) reads other channels: M4's series are "
                                  "univariate, each forecast from its own history (long-term task only)")
    _require(draft.subset_rand_ratio == 1, "--subset_rand_ratio: the short-term task draws its training windows "
                                           "at random already (--history_multiple sets where from)")
    for name in ("target", "date_format", "fill_missing"):
        _require(getattr(draft, name) is None, f"--{name}: M4's files are series of values without dates or "
                                               "columns (long-term task only)")
    draft.freq = None  # no dates: a model that reads calendar features gets zeros (TSLib's scripts say --freq h)
    subset = m4.SUBSETS[draft.seasonal_patterns]
    multiple = m4.LOOKBACK_MULTIPLE if draft.lookback_multiple is None else draft.lookback_multiple
    _require(multiple > 0, f"--lookback_multiple must be > 0, got {multiple}")
    history = subset.history if draft.history_multiple is None else draft.history_multiple
    _require(history * subset.horizon >= 1, f"--history_multiple {history}: no training window would end within "
                                            f"the last {history} x {subset.horizon} points of a series")
    lengths = {"seq_len": max(1, round(multiple * subset.horizon)), "output_token_len": subset.horizon,
               "test_pred_len": subset.horizon}
    changed = [f"--{name} {getattr(draft, name)}" for name, value in lengths.items()
               if getattr(draft, name) not in (value, None, parser().get_default(name),
                                               dialects.DEFAULTS.get(draft.origin.dialect, {}).get(name))]
    if changed:
        raise ConfigError(f"{', '.join(changed)}: the M4 {draft.seasonal_patterns} protocol fixes the horizon at "
                          f"{subset.horizon} and the lookback at --lookback_multiple x horizon = "
                          f"{lengths['seq_len']}; drop them")
    for name, value in lengths.items():
        setattr(draft, name, value)
    draft.lookback_multiple, draft.history_multiple = multiple, history
    _require(models.capabilities(draft.model).direct,
             f"model {draft.model} forecasts autoregressively only; the short-term task trains direct forecasts")
    draft.nonautoregressive = draft.univariate = draft.valid_last = True
    draft.target_only = False  # one value per row: TSLib's --features S or M read the same
    if not draft.no_epoch_test:
        log.info("the short-term task scores the test set once, after training: no test loss per epoch")
    draft.no_epoch_test = True


# ---- checks: what no data is needed for (the data's happen when it is loaded) -----------------------------
def _check_lengths_and_ranges(draft) -> None:
    known_schedules = schedules.registry()
    _require(draft.lradj in known_schedules,
             f"unknown --lradj {draft.lradj!r}; available: {', '.join(sorted(known_schedules))}")
    for name in ("seq_len", "input_token_len", "output_token_len", "test_pred_len", "batch_size", "train_epochs",
                 "patience", "itr", "accum_steps"):
        _require(getattr(draft, name) >= 1, f"--{name} must be >= 1, got {getattr(draft, name)}")
    _check_hparams(draft)
    _require(draft.learning_rate > 0, f"--learning_rate must be > 0, got {draft.learning_rate}")
    _require(0 < draft.subset_rand_ratio <= 1,
             f"--subset_rand_ratio must be in (0, 1], got {draft.subset_rand_ratio}")
    for name in ("val_windows", "val_windows_end", "test_windows", "train_steps", "val_every", "save_every"):
        _require(getattr(draft, name) >= 0, f"--{name} must be >= 0, got {getattr(draft, name)}")
    _require(draft.train_steps or not (draft.val_every or draft.save_every),
             "--val_every and --save_every count steps of a --train_steps run")
    _require(draft.warmup_epochs >= 0, f"--warmup_epochs must be >= 0, got {draft.warmup_epochs}")
    _require(0 < draft.pct_start < 1, f"--pct_start must be in (0, 1), got {draft.pct_start}")
    _require(draft.dist_timeout > 0, f"--dist_timeout must be > 0 minutes, got {draft.dist_timeout}")
    _require(draft.threads is None or draft.threads >= 1, f"--threads must be >= 1, got {draft.threads}")


def _check_hparams(draft) -> None:
    """Each hyper-parameter of the chosen model in its declared range; flags set for other models are noted."""
    mine = set()
    for f in models.hyperparameter_fields(models.model_class(draft.model)):
        mine.add(f.name)
        value, low, high = model_hparams(draft)[f.name], f.metadata["low"], f.metadata["high"]
        if value is None or isinstance(value, bool):
            continue
        if low is not None and high is not None:
            _require(low <= value < high, f"--{f.name} must be in [{low}, {high}), got {value}")
        elif low is not None:
            _require(value >= low, f"--{f.name} must be >= {low}, got {value}")
    dialect_defaults = dialects.DEFAULTS.get(draft.origin.dialect, {})
    ignored = [name for name, default in parser().model_flag_defaults.items()
               if name not in mine and getattr(draft, name) != dialect_defaults.get(name, default)]
    if ignored:
        log.info("not used by %s, ignored: %s", draft.model, ", ".join(f"--{n}" for n in sorted(ignored)))


def _check_mode(draft) -> None:
    """The forecasting mode the chosen model supports, and its tokens."""
    caps = models.capabilities(draft.model)
    if draft.nonautoregressive:
        _require(caps.direct, f"model {draft.model} does not support direct (--nonautoregressive) forecasting")
    else:
        _require(caps.autoregressive, f"model {draft.model} is not autoregressive; add --nonautoregressive")
    if uses_input_tokens(draft):
        _require(draft.seq_len % draft.input_token_len == 0,
                 f"--seq_len {draft.seq_len} must be a multiple of --input_token_len {draft.input_token_len}")


def _check_data_flags(draft) -> None:
    known = protocols.registry()
    _require(draft.protocol in known, f"unknown --protocol {draft.protocol!r}; available: {', '.join(sorted(known))}")
    if draft.protocol != protocols.DEFAULT:
        _require(draft.task == "long_term" and draft.data != corpus.NAME,
                 f"--protocol {draft.protocol} splits one table's rows (the long-term task): "
                 + ("M4 has its own protocol (--task short_term)" if draft.task != "long_term"
                    else "--data corpus splits each series of its files"))
    _require(known[draft.protocol].drops_test_windows or not draft.test_drop_last,
             f"--test_drop_last: the {draft.protocol} protocol scores every test window")
    if draft.freq is not None:
        feature_set(draft.freq)
    _require(draft.date_format is None or "%" in draft.date_format or draft.date_format in ("ISO8601", "mixed"),
             f"--date_format {draft.date_format!r} is not a date format: give a strftime format (%d.%m.%Y %H:%M), "
             "ISO8601 or mixed")
    _require(not draft.dayfirst or draft.date_format in (None, "mixed"),
             f"--date_format {draft.date_format} fixes where the day is: drop --dayfirst")
    _require(not (draft.target_only and (draft.covariate or draft.univariate)),
             "--target_only reads one channel: --covariate and --univariate do not apply")


def _check_covariates(draft) -> None:
    caps = models.capabilities(draft.model)
    if draft.covariate:
        _require(caps.covariate, f"model {draft.model} is channel-independent: covariates cannot inform the "
                                 "target, so --covariate is not supported")
        _require(not draft.univariate,
                 "--covariate needs the channels together; it cannot be used with --univariate")
        _require(not caps.exogenous or draft.test_pred_len <= draft.output_token_len,
                 f"model {draft.model} forecasts the target alone with --covariate, so it cannot roll its forecast "
                 f"out to --test_pred_len {draft.test_pred_len} > --output_token_len {draft.output_token_len}")
    _require(not draft.last_token or draft.covariate, "--last_token only applies with --covariate")


def _check_loss(draft) -> None:
    """The quantile levels, a model that can emit the values per point a probabilistic loss asks for, and sample
    paths only of a distribution."""
    levels = draft.quantiles
    _require(all(0 < q < 1 for q in levels), f"--quantiles {_joined(levels)}: each level must be in (0, 1)")
    _require(all(a < b for a, b in zip(levels, levels[1:])),
             f"--quantiles {_joined(levels)}: give each level once, in increasing order")
    objective = losses.objective(draft.loss, levels)
    _require(objective.outputs == 1 or models.capabilities(draft.model).multi_output,
             f"--loss {draft.loss} needs {objective.outputs} values per forecast point: model {draft.model} returns "
             "one (its capabilities lack multi_output)")
    own = model_hparams(draft).get("quantile_levels")  # a model that forecasts fixed quantiles (a published one's)
    try:
        own_levels = own and quantile_levels(own)
    except ValueError as e:
        raise ConfigError(f"--quantile_levels: {e}") from None
    _require(own is None or objective.loss.kind != "quantile" or _joined(levels) == _joined(own_levels),
             f"--quantiles {_joined(levels)}: model {draft.model} forecasts the quantiles {own} "
             "(--quantile_levels); give those, or a point loss for its median")
    if draft.num_samples is None:
        return
    _require(draft.num_samples >= 2, f"--num_samples {draft.num_samples}: draw at least 2 sample paths per window "
                                     "(crps_sample compares samples with each other)")
    kind = objective.loss.kind
    _require(kind == "distribution", f"--num_samples: --loss {draft.loss} forecasts "
             + ("quantiles, not a distribution to sample: its CRPS is computed from them (crps, on the --quantiles "
                "grid)" if kind == "quantile" else "a point, a point mass: its CRPS is its MAE (crps)")
             + "; drop --num_samples, or train a distribution (gaussian, student_t, mixture)")


def _joined(levels: tuple) -> str:
    return ",".join(f"{q:g}" for q in levels)


def _check_run_kind(draft) -> None:
    """Training, fine-tuning, testing a run, testing weights zero-shot: the flags of one of them."""
    _require(not draft.adaptation or draft.pretrain_model_path is not None,
             "--adaptation starts from pretrained weights: name them with --pretrain_model_path")
    _require(draft.adaptation or draft.pretrain_model_path is None or not draft.is_training,
             "--pretrain_model_path: add --adaptation to fine-tune from it, or --is_training 0 to test it zero-shot")
    _require(not zero_shot(draft) or draft.test_dir is None, "a zero-shot test (--pretrain_model_path with "
             "--is_training 0) tests those weights, not a run of --test_dir")
    _require(draft.pretrained is None or (draft.pretrain_model_path is None and not draft.adaptation),
             "--pretrained is a published checkpoint (fine-tuned with --is_training 1); --adaptation "
             "--pretrain_model_path one of this framework's: choose one")
    _require(draft.finetune == "full" or draft.test_dir is not None  # a fine-tuned run tested as it was trained
             or (draft.is_training and (draft.pretrained or draft.adaptation)),
             f"--finetune {draft.finetune} trains part of pretrained weights: give --pretrained (or --adaptation "
             "--pretrain_model_path) with --is_training 1")
    _require(draft.finetune == "lora" or (draft.lora_rank, draft.lora_alpha) == (parser().get_default("lora_rank"),
                                                                                 parser().get_default("lora_alpha")),
             "--lora_rank and --lora_alpha apply with --finetune lora")
    _require(draft.lora_rank >= 1 and draft.lora_alpha > 0,
             f"--lora_rank must be >= 1 and --lora_alpha > 0, got {draft.lora_rank} and {draft.lora_alpha}")
    _require(not (draft.overwrite and draft.resume == "auto"),
             "--overwrite trains again from scratch; --resume auto continues: choose one")
    _require(not (draft.overwrite and not draft.is_training),
             "--overwrite only applies to training (--is_training 1)")
    _require(draft.test_dir is None or not draft.is_training, "--test_dir only applies with --is_training 0")
    _require(draft.test_dir is None or draft.itr == 1, "--test_dir tests one checkpoint: --itr must be 1")


def _check_distribution(draft) -> None:
    _require(not draft.cpu_offload or draft.fsdp,
             "--cpu_offload moves the shards of --fsdp to host memory: add --fsdp")
    _require(not draft.cpu_offload or (draft.device != "cpu" and torch.cuda.is_available()),
             "--cpu_offload keeps FSDP's shards in host memory while a GPU computes: a CPU run holds everything "
             "there already")
    _require(not (draft.fsdp and draft.zero), "--fsdp shards the optimizer state already: drop --zero")
    _require(draft.amp_dtype is None or draft.use_amp, "--amp_dtype chooses --use_amp's precision: add --use_amp")
    _require(not (draft.fsdp and draft.amp_dtype == "fp16"),
             "--fsdp gathers parameters in bf16 and keeps no loss scale for fp16: drop --amp_dtype fp16")
    _require(not (draft.fsdp and draft.compile), "--fsdp with --compile is not supported: drop one of them")
    _require(not (draft.fsdp and draft.find_unused_parameters),
             "--fsdp needs every rank to use every parameter in each step: drop --find_unused_parameters "
             "(a model that leaves parameters unused trains with plain --ddp)")
    _require(not draft.fsdp or draft.ddp, "--fsdp shards the model across the ranks of a torchrun job: add --ddp")
