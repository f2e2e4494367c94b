"""Time-Series-Library and OpenLTM command lines, run unchanged: their flags translated into ours.

`--task_name long_term_forecast` (TSLib) or `--task_name forecast` (OpenLTM) selects the dialect. Its
defaults apply to the flags a script leaves out (a TSLib script that omits --e_layers trains TSLib's 2
layers, not our model's default), its flag names map to ours, flags without meaning here are explained
once in the log, and flags we cannot honour are refused with one line. What comes out is the native
command line the script means: a run's identity is the same whichever way it is written. docs/tslib.md
is generated from the table below (`python -m exp.dialects > docs/tslib.md`).
"""
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import models
from data_provider import datasets, m4
from utils import losses
from utils.errors import ConfigError

TSLIB, OPENLTM = "TSLib", "OpenLTM"
TASKS = {"long_term_forecast": TSLIB, "short_term_forecast": TSLIB, "forecast": OPENLTM}
SHORT_TERM = "short_term_forecast"  # TSLib's M4 task: our --task short_term

# The defaults of their run.py for the flags we share (TSLib fixes the seed to 2021 whatever --seed says)
DEFAULTS = {
    TSLIB: {"nonautoregressive": True, "seq_len": 96, "output_token_len": 96, "e_layers": 2, "d_layers": 1,
            "d_model": 512, "n_heads": 8, "d_ff": 2048, "dropout": 0.1, "activation": "gelu", "use_norm": True,
            "moving_avg": 25, "top_k": 5, "num_kernels": 6, "down_sampling_layers": 0, "down_sampling_window": 1,
            "individual": False, "freq": "h", "learning_rate": 1e-4, "batch_size": 32, "train_epochs": 10,
            "patience": 3, "lradj": "type1", "des": "test", "seed": 2021, "factor": 1, "router_factor": 1,
            "label_len": 48},
    OPENLTM: {"seq_len": 672, "input_token_len": 576, "output_token_len": 96, "test_pred_len": 96, "e_layers": 1,
              "d_model": 512, "n_heads": 8, "d_ff": 2048, "dropout": 0.1, "activation": "relu", "use_norm": False,
              "learning_rate": 1e-4, "batch_size": 32, "train_epochs": 10, "patience": 3, "lradj": "type1",
              "des": "test", "seed": 2021, "weight_decay": 0.0},
}
# What TSLib's implementation of a model fixes whatever its flags say (models/<Name>.py there): DLinear never
# normalises, PatchTST, iTransformer and TimesNet always do (TimeMixer reads --use_norm), PatchTST's patches are
# 16 points 8 apart and its head drops out at --dropout (after its linear layer there, before it here), Informer
# computes as its port (variant tslib), as does MICN (its feed-forward block), FEDformer keeps 32 random modes,
# Crossformer segments of 12. They hold on every data set, M4 included (FEDformer's modes are at most half a length,
# Crossformer pads the window and the horizon to whole segments, in both codes). A flag name as value: that flag's
# value.
TSLIB_FIXED = {"dlinear": {"use_norm": False},
               "patchtst": {"use_norm": True, "head_dropout": "--dropout", "patch_len": 16, "stride": 8},
               "itransformer": {"use_norm": True}, "timesnet": {"use_norm": True},
               "informer": {"variant": "tslib"}, "micn": {"variant": "tslib"},
               "fedformer": {"modes": 32, "mode_select": "random"}, "crossformer": {"seg_len": 12}}
# TSLib's own flags among ours: a script's value for them yields to what the model's code fixes; a flag only we
# have (--head_dropout, --stride), given explicitly, wins
TSLIB_FLAGS = {*DEFAULTS[TSLIB], "patch_len"}
CHANNEL_FLAGS = ("enc_in", "dec_in", "c_out")


@dataclass
class Translation:
    dialect: str | None
    argv: list = field(default_factory=list)       # the native flags among the given ones
    defaults: dict = field(default_factory=dict)   # flag -> value our parser starts from
    mapped: dict = field(default_factory=dict)     # our flag -> the foreign flag that set it
    notes: list = field(default_factory=list)      # foreign flags accepted without effect, explained
    channels: dict = field(default_factory=dict)   # --enc_in/--dec_in/--c_out: checked against the data
    equal: dict = field(default_factory=dict)      # our flag -> (foreign flag, value) it must equal
    given: set = field(default_factory=set)        # our flags given explicitly
    openltm_data: str | None = None                # OpenLTM's --data, resolved with --data_path after parsing
    cosine: bool = False                           # OpenLTM's --cosine: it overrides --lradj
    tmax: int = 10                                 # OpenLTM's cosine period in epochs
    model_flags: dict = field(default_factory=dict)  # our flag names -> (foreign flag, value, why ignored): the
    #                                                  chosen model's hyper-parameter if it declares one
    ttm: dict = field(default_factory=dict)        # OpenLTM's TTM flags as given: flag -> value (None: a switch)


@dataclass(frozen=True)
class Foreign:
    flag: str
    dialects: tuple
    here: str                                      # what it becomes here (the docs' table)
    apply: Callable[[str, str, Translation], None]  # (flag, value, translation)
    switch: bool = False                           # takes no value
    many: bool = False                             # one value or more (TSLib's nargs='+'), joined by commas


def _sets(dest: str, convert=lambda flag, value: value):
    def apply(flag, value, t):
        t.defaults[dest], t.mapped[dest] = convert(flag, value), flag
    return apply


def _note(why: str):
    def apply(flag, value, t):
        t.notes.append(f"{flag}{'' if value is None else ' ' + value}: {why}")
    return apply


def _refuse(why: str):
    def apply(flag, value, t):
        raise ConfigError(f"{flag}{'' if value is None else ' ' + value}: {why}")
    return apply


def _only(allowed: tuple, why: str, otherwise: str):
    def apply(flag, value, t):
        (_note(why) if value in allowed else _refuse(otherwise))(flag, value, t)
    return apply


def _int(flag: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{flag}: expected an integer, got {value!r}") from None


def _features(flag, value, t):
    if value not in ("M", "S", "MS"):
        raise ConfigError(f"{flag} {value}: one of M (all channels), S (the target alone), MS (all -> the target)")
    if value != "M":
        _sets("covariate" if value == "MS" else "target_only", lambda f, v: True)(flag, value, t)


def _channels(flag, value, t):
    t.channels[flag] = _int(flag, value)


def _use_gpu(flag, value, t):
    if flag == "--no_use_gpu" or str(value).lower() in ("false", "0"):
        _sets("device", lambda f, v: "cpu")(flag, value, t)
    else:
        _note("the GPU is used when there is one (--device auto)")(flag, value, t)


def _gpu(flag, value, t):
    if _int(flag, value) != 0:
        raise ConfigError(f"{flag} {value}: each process uses cuda:LOCAL_RANK; run with CUDA_VISIBLE_DEVICES={value}")
    _note("each process uses cuda:LOCAL_RANK; CUDA_VISIBLE_DEVICES chooses the GPUs")(flag, value, t)


_OPENLTM_DATA = {"MultivariateDatasetBenchmark": False, "UnivariateDatasetBenchmark": True}
_ETT = ("ETTh1", "ETTh2", "ETTm1", "ETTm2")


def _openltm_data(flag, value, t):
    """OpenLTM's benchmark loaders pick ETT's borders by file name and split every other file 70/10/20."""
    if value in _OPENLTM_DATA:
        t.openltm_data = value
    else:  # one of our names
        t.argv += [flag, value]
        t.given.add("data")


def _int_list(dest: str):
    """A flag of ours that TSLib declares with nargs='+' and type int (`256 256` there, `256,256` here): ours."""
    def apply(flag, value, t):
        for part in value.split(","):
            _int(flag, part)
        t.argv += [flag, value]
        t.given.add(dest)
    return apply


def _loss(flag, value, t):
    if value.lower() not in losses.registry():
        raise ConfigError(f"{flag} {value}: the losses here are {', '.join(sorted(losses.registry()))} "
                          "(add one as a file in utils/losses/, docs/extending.md)")
    _sets("loss", lambda f, v: v.lower())(flag, value, t)


def _cosine(flag, value, t):
    t.defaults["lradj"], t.cosine = "cosine", True


def _tmax(flag, value, t):
    t.tmax = _int(flag, value)


def _model_flag(dests: tuple, otherwise: str):
    """A TSLib flag that some models here declare (under one of `dests`): it sets the chosen model's
    hyper-parameter, or is noted."""
    def apply(flag, value, t):
        t.model_flags[dests] = (flag, value, otherwise)
    return apply


def _equal(dest: str):
    def apply(flag, value, t):
        t.equal[dest] = (flag, _int(flag, value))
    return apply


def _ttm(flag, value, t):
    t.ttm[flag] = value


# OpenLTM's TTM (models/ttm.py there) as ours: its flags -> (our hyper-parameter, OpenLTM's default)
_OPENLTM_TTM = {"--patch_size": ("patch_len", "16"), "--AP_levels": ("ap_levels", "0"), "--layers": ("d_layers", "8"),
                "--hidden_dim": ("decoder_d_model", "16"), "--d_mode": ("decoder_mode", "common_channel")}
_OPENLTM_TTM_STRIDE, _OPENLTM_TTM_MODE = "8", "mix_channel"  # OpenLTM's defaults, which ours cannot build


_BOTH = (TSLIB, OPENLTM)
_DDP = "DataParallel is not offered: launch torchrun --nproc_per_node=N run.py --ddp (docs/distributed.md)"
FOREIGN = [
    Foreign("--pred_len", (TSLIB,), "`--output_token_len`, tested at the same horizon",
            _sets("output_token_len", _int)),
    Foreign("--seed", (TSLIB,), "noted and ignored: TSLib's run.py seeds 2021 whatever `--seed` says",
            _note("ignored: TSLib's run.py seeds every run with 2021 (its --seed only drives augmentation)")),
    Foreign("--label_len", (TSLIB,), "`--label_len` of the encoder-decoders (Informer, Autoformer, FEDformer); "
            "noted and ignored for the other models",
            _model_flag(("label_len",), "ignored: this model reads no decoder start tokens")),
    Foreign("--features", (TSLIB,), "`M`: all channels; `MS`: `--covariate`; `S`: `--target_only` (all channels for "
            "files without column names, Solar and PEMS, as TSLib's loaders do)", _features),
    *(Foreign(f"--{name}", (TSLIB,), "checked against the data's channels (the data sets them)", _channels)
      for name in CHANNEL_FLAGS),
    Foreign("--embed", (TSLIB,), "`timeF` only (the time features TSLib's timeenc=1 builds)",
            _only(("timeF",), "the time features are TSLib's timeF", "only timeF time features are built here")),
    Foreign("--factor", (TSLIB,), "`--factor` of the models that declare it (Informer's ProbSparse sampling, "
            "Auto-Correlation's top-k, Crossformer's routers); noted and ignored for the others",
            _model_flag(("factor", "router_factor"),
                        "ignored: this model has full attention (no ProbSparse/Auto-Correlation factor)")),
    Foreign("--factor", (OPENLTM,), "noted and ignored: OpenLTM's TTM fixes its mixers' expansion at 2 whatever it "
            "says, as ours does by default (`--expansion`)",
            _note("ignored: OpenLTM's TTM fixes its mixers' expansion at 2, as ours by default (--expansion)")),
    Foreign("--patch_size", (OPENLTM,), "TTM: `--patch_len`, where its patches lie end to end as ours (`--stride` "
            "equal to it, `--seq_len` a multiple of it), else refused; omitted: OpenLTM's 16. Other models: noted and "
            "ignored", _ttm),
    Foreign("--stride", (OPENLTM,), "TTM: must equal `--patch_size` (omitted: OpenLTM's 8, refused unless the patch "
            "is 8). Models that declare `--stride` (PatchTST): theirs. Others: noted and ignored", _ttm),
    Foreign("--AP_levels", (OPENLTM,), "TTM: `--ap_levels`, 1 for 0 (OpenLTM's 0 and 1 build the same mixer layers); "
            "omitted: OpenLTM's 0", _ttm),
    Foreign("--mode", (OPENLTM,), "TTM: `common_channel` only, refused otherwise (omitted: OpenLTM's `mix_channel`): "
            "our TTM's backbone keeps channels apart, its decoder mixes them (`--d_mode mix_channel`)", _ttm),
    Foreign("--d_mode", (OPENLTM,), "TTM: `--decoder_mode`; omitted: OpenLTM's `common_channel`", _ttm),
    Foreign("--layers", (OPENLTM,), "TTM: `--d_layers`, the decoder's mixer layers; omitted: OpenLTM's 8", _ttm),
    Foreign("--hidden_dim", (OPENLTM,), "TTM: `--decoder_d_model`; omitted: OpenLTM's 16", _ttm),
    Foreign("--n_vars", (OPENLTM,), "TTM: checked against the data's channels (the data sets them)", _ttm),
    Foreign("--use_decoder", (OPENLTM,), "noted: OpenLTM's TTM always has its decoder, as ours", _ttm, switch=True),
    Foreign("--p_hidden_dims", (TSLIB,), "`--p_hidden_dims`: TSLib's list (`256 256`) or ours (`256,256`)",
            _int_list("p_hidden_dims"), many=True),
    Foreign("--use_norm", (TSLIB,), "`--use_norm` when 1 (TSLib's default), off when 0",
            _sets("use_norm", lambda f, v: _int(f, v) != 0)),
    Foreign("--distil", (TSLIB,), "`--no-distil`: TSLib's switch turns Informer's distilling off",
            _sets("distil", lambda f, v: False), switch=True),
    Foreign("--use_gpu", (TSLIB,), "the GPU is used when present; `False`: `--device cpu`", _use_gpu),
    Foreign("--no_use_gpu", (TSLIB,), "`--device cpu`", _use_gpu, switch=True),
    Foreign("--gpu", _BOTH, "0: noted; other ids: refused, choose GPUs with `CUDA_VISIBLE_DEVICES`", _gpu),
    Foreign("--gpu_type", (TSLIB,), "`cuda` only", _only(("cuda",), "CUDA is used when present",
                                                         "only CUDA GPUs are supported")),
    Foreign("--use_multi_gpu", (TSLIB,), "refused: launch with torchrun and `--ddp`", _refuse(_DDP), switch=True),
    Foreign("--dp", (OPENLTM,), "refused: launch with torchrun and `--ddp`", _refuse(_DDP), switch=True),
    Foreign("--devices", _BOTH, "noted and ignored: torchrun and `CUDA_VISIBLE_DEVICES` choose devices",
            _note("ignored: torchrun --nproc_per_node and CUDA_VISIBLE_DEVICES choose the devices")),
    Foreign("--num_workers", _BOTH, "noted and ignored: batches are gathered on the device, no loader workers",
            _note("ignored: batches are gathered from one tensor on the device, without loader workers")),
    Foreign("--loss", _BOTH, "`--loss`, lower-cased (`MSE`: `mse`); one that utils/losses/ lacks is refused", _loss),
    Foreign("--down_sampling_method", (TSLIB,), "`avg` only (TimeMixer pools by averaging)",
            _only(("avg",), "TimeMixer pools by averaging", "TimeMixer here pools by averaging only")),
    Foreign("--channel_independence", (TSLIB,), "1 only (TimeMixer here is channel-independent)",
            _only(("1",), "TimeMixer here is channel-independent", "TimeMixer here is channel-independent only")),
    Foreign("--decomp_method", (TSLIB,), "`moving_avg` only",
            _only(("moving_avg",), "decomposition by moving average", "decomposition by moving average only")),
    Foreign("--augmentation_ratio", (TSLIB,), "0 only",
            _only(("0",), "no augmentation", "augmentation is not offered")),
    Foreign("--inverse", (TSLIB,), "refused: metrics are on the scaled data, as in the papers' tables",
            _refuse("metrics are on the scaled data here, as in the papers' tables"), switch=True),
    Foreign("--use_dtw", (TSLIB,), "refused: add DTW as a metric file (docs/extending.md)",
            _refuse("DTW is not a metric here; add one in utils/metrics/ (docs/extending.md)"), switch=True),
    Foreign("--data", (OPENLTM,), "`MultivariateDatasetBenchmark`: ETT files (by name) with their 12/4/4 months, "
            "any other file 70/10/20 with lookback (`--data custom`); `UnivariateDatasetBenchmark`: the same with "
            "`--univariate`", _openltm_data),
    Foreign("--test_seq_len", (OPENLTM,), "must equal `--seq_len` (tests use the training lookback); omitted: "
            "OpenLTM's 672", _equal("seq_len")),
    Foreign("--test_dir", (OPENLTM,), "noted and ignored: `--is_training 0` tests the run the flags describe",
            _note("ignored: OpenLTM's setting name; --is_training 0 tests the run these flags describe")),
    Foreign("--subset_rand_ratio", (OPENLTM,), "1 only: OpenLTM trains on the first fraction of the windows, "
            "ours on a seeded random fraction", _only(("1", "1.0"), "all training windows",
                                                      "OpenLTM trains on the first fraction of the windows, this "
                                                      "framework on a seeded random fraction: use our flags")),
    Foreign("--cosine", (OPENLTM,), "`--lradj cosine` over `--tmax` epochs (which must be `--train_epochs`); "
            "it overrides `--lradj`, as in OpenLTM", _cosine, switch=True),
    Foreign("--tmax", (OPENLTM,), "with `--cosine`: must equal `--train_epochs` (omitted: OpenLTM's 10)", _tmax),
    Foreign("--test_flag", (OPENLTM,), "`T` only: the test split of `--data`",
            _only(("T",), "the test split of --data is used", "testing on another dataset is not offered")),
    Foreign("--load_time_stamp", (OPENLTM,), "`none` only",
            _only(("none",), "no precomputed time-stamp embeddings",
                  "precomputed time-stamp embeddings are not offered")),
    Foreign("--output_attention", (OPENLTM,), "noted and ignored", _note("ignored: attention maps are not returned"),
            switch=True),
    Foreign("--flash_attention", (OPENLTM,), "noted and ignored: torch chooses the attention kernel",
            _note("ignored: torch's scaled_dot_product_attention chooses the kernel"), switch=True),
]
_BY_FLAG = {(f.flag, dialect): f for f in FOREIGN for dialect in f.dialects}
_BOOLEAN_VALUES = ("true", "false", "1", "0")


def task_name(argv: list) -> str | None:
    """The --task_name given (the last one, as argparse would), None for our own flags."""
    task = None
    for i, token in enumerate(argv):
        name, eq, value = token.partition("=")
        if name == "--task_name":
            task = value if eq else argv[i + 1] if i + 1 < len(argv) else ""
            if task not in TASKS:
                raise ConfigError(f"--task_name {task}: the forecasting tasks are long_term_forecast and "
                                  "short_term_forecast (TSLib) and forecast (OpenLTM)")
    return task


def dialect_of(argv: list) -> str | None:
    """The dialect --task_name selects, None for our own flags."""
    task = task_name(argv)
    return None if task is None else TASKS[task]


def translate(argv: list, option_dests: dict) -> Translation:
    """Split a command line into our flags and the dialect's; option_dests: our option string -> flag name."""
    t = Translation(dialect_of(argv))
    if t.dialect is None:
        t.argv = list(argv)
        return t
    t.defaults = dict(DEFAULTS[t.dialect])
    if task_name(argv) == SHORT_TERM:
        t.defaults["task"] = "short_term"
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, inline = token.partition("=")
        foreign = _BY_FLAG.get((name, t.dialect))
        if name == "--task_name":
            i += 1 if eq else 2
            continue
        if foreign is None:
            if name in option_dests:
                t.given.add(option_dests[name])
            t.argv.append(token)
            i += 1
            continue
        optional = name == "--use_gpu" and (i + 1 >= len(argv) or argv[i + 1].lower() not in _BOOLEAN_VALUES)
        if foreign.switch or (optional and not eq):
            if eq:
                raise ConfigError(f"{name} takes no value, got {inline!r}")
            value, i = None, i + 1
        elif eq:
            value, i = inline, i + 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            end = i + 2
            while foreign.many and end < len(argv) and not argv[end].startswith("--"):
                end += 1
            value, i = ",".join(argv[i + 1:end]), end
        else:
            raise ConfigError(f"{name}: expected a value")
        foreign.apply(name, value, t)
    both = sorted(dest for dest in t.mapped if dest in t.given)
    if both:
        raise ConfigError(f"{t.mapped[both[0]]} and --{both[0]} both given: they set the same thing; keep one")
    return t


def complete(args, t: Translation) -> None:
    """What the dialect decides once every flag is known: TSLib's fixed choices for the chosen model and data,
    OpenLTM's data and cosine schedule, and the foreign flags that must agree with ours."""
    if t.dialect == TSLIB:
        _tslib_fixed(args, t)
        _set_model_flags(args, t)
        if t.defaults.get("task") == "short_term":  # --task_name short_term_forecast
            _tslib_m4_lengths(args, t)
    if t.dialect == OPENLTM:
        _openltm_model_flags(args, t)
    if t.openltm_data is not None:
        args.data_path = args.data_path or "ETTh1.csv"  # OpenLTM's default file
        stem = os.path.splitext(os.path.basename(args.data_path))[0]
        args.data = stem if stem in _ETT else "custom"
        args.univariate = args.univariate or _OPENLTM_DATA[t.openltm_data]
    if t.cosine:
        if args.lradj != "cosine":
            t.notes.append(f"--lradj {args.lradj}: overridden by --cosine, as in OpenLTM")
            args.lradj = "cosine"
        t.equal["train_epochs"] = ("--tmax", t.tmax)
    if t.dialect == OPENLTM:
        t.equal.setdefault("seq_len", ("--test_seq_len (OpenLTM's default)", 672))
    for dest, (flag, value) in t.equal.items():
        if getattr(args, dest) != value:
            raise ConfigError(f"{flag} {value} must equal --{dest} ({getattr(args, dest)}) here")


def _tslib_fixed(args, t: Translation) -> None:
    try:
        fixed = dict(TSLIB_FIXED.get(models.resolve(args.model), {}))
        named_columns = args.data == m4.NAME or datasets.resolve(args.data, args.data_path).target is not None
    except KeyError:
        return  # resolution (exp/config.py) reports the unknown model or data
    if not named_columns and "target_only" in t.mapped:
        fixed["target_only"] = False  # TSLib's Solar and PEMS loaders read every channel whatever --features says
    for dest, value in fixed.items():
        value = getattr(args, value[2:]) if isinstance(value, str) and value.startswith("--") else value
        if dest in t.given and dest not in TSLIB_FLAGS:
            continue
        script_flag = t.mapped.get(dest, f"--{dest}" if dest in t.given else None)
        if script_flag and getattr(args, dest) != value:
            t.notes.append(f"{script_flag}: ignored, as by TSLib ({dest} is {value} there for {args.model} "
                           f"on {args.data})")
        setattr(args, dest, value)


def _tslib_m4_lengths(args, t: Translation) -> None:
    """TSLib's exp_short_term_forecasting on M4: pred_len the subset's horizon, seq_len twice it and label_len
    equal to it, whatever the script says. The lookback and horizon are resolution's (our short-term task computes
    them alike); the script's are noted and dropped here, and label_len set for the models that read it."""
    if args.data != m4.NAME or args.seasonal_patterns not in m4.SUBSETS:
        return  # resolution reports it
    horizon = m4.SUBSETS[args.seasonal_patterns].horizon
    why = f"ignored, as by TSLib (its short-term task sets it from the M4 {args.seasonal_patterns} horizon, {horizon})"
    for dest, flag, value in (("seq_len", "--seq_len", 2 * horizon), ("output_token_len", "--pred_len", horizon)):
        if (dest in t.given or dest in t.mapped) and getattr(args, dest) != value:
            t.notes.append(f"{flag} {getattr(args, dest)}: {why}")
            setattr(args, dest, DEFAULTS[TSLIB][dest])  # as if omitted: resolution sets the protocol's
    try:
        declared = models.hyperparameters(args.model)
    except (KeyError, models.ModelFileError):
        return
    if "label_len" in declared:
        if ("label_len",) in t.model_flags and args.label_len != horizon:
            t.notes.append(f"--label_len {args.label_len}: {why}")
        args.label_len = horizon


def _set_model_flags(args, t: Translation) -> None:
    try:
        declared = models.hyperparameters(args.model)
    except (KeyError, models.ModelFileError):
        return  # resolution reports it
    for dests, (flag, value, otherwise) in t.model_flags.items():
        dest = next((d for d in dests if d in declared), None)
        if dest is not None:
            setattr(args, dest, _int(flag, value))
        else:
            t.notes.append(f"{flag} {value}: {otherwise}")


def _openltm_model_flags(args, t: Translation) -> None:
    """OpenLTM's TTM flags: TTM's hyper-parameters; for another model, its own --stride or a note."""
    try:
        model = models.resolve(args.model)
        declared = models.hyperparameters(model)
    except (KeyError, models.ModelFileError):
        return  # resolution reports it
    if model == "ttm":
        _openltm_ttm(args, t)
        return
    for flag, value in t.ttm.items():
        if flag[2:] in declared:  # --stride: PatchTST's here
            setattr(args, flag[2:], _int(flag, value))
        else:
            _note("ignored: read by OpenLTM's TTM")(flag, value, t)


def _openltm_ttm(args, t: Translation) -> None:
    """The TTM of OpenLTM's flags (its defaults for those a script leaves out) as ours; where ours computes
    something else, one line naming every such flag."""
    for flag, (dest, default) in _OPENLTM_TTM.items():
        if flag in t.ttm and dest in t.given:
            raise ConfigError(f"{flag} and --{dest} both given: they set the same thing; keep one")
        if dest not in t.given:
            value = t.ttm.get(flag, default)
            setattr(args, dest, value if dest == "decoder_mode" else _int(flag, value))
    choices = next(f for f in models.hyperparameter_fields(models.model_class("ttm"))
                   if f.name == "decoder_mode").metadata["choices"]
    if args.decoder_mode not in choices:
        raise ConfigError(f"--d_mode {args.decoder_mode}: one of {', '.join(choices)}")
    args.ap_levels = max(args.ap_levels, 1)  # OpenLTM's 0 is e_layers plain mixer layers: our one level of them
    if "head_dropout" not in t.given:
        args.head_dropout = args.dropout  # OpenLTM's TTM drops out before its head at --dropout
    if "--n_vars" in t.ttm:
        t.channels["--n_vars"] = _int("--n_vars", t.ttm["--n_vars"])
    if "--use_decoder" in t.ttm:
        _note("OpenLTM's TTM always has its decoder, as ours")("--use_decoder", None, t)

    def named(flag: str) -> str:
        return flag if flag in t.ttm else f"{flag} (OpenLTM's default)"
    unlike = []
    mode = t.ttm.get("--mode", _OPENLTM_TTM_MODE)
    if mode != "common_channel":
        unlike.append(f"{named('--mode')} {mode} mixes channels in the backbone, ours in the decoder only "
                      "(--d_mode mix_channel)")
    stride = _int("--stride", t.ttm.get("--stride", _OPENLTM_TTM_STRIDE))
    if stride != args.patch_len:
        unlike.append(f"{named('--stride')} {stride} with --patch_size {args.patch_len} starts a patch every {stride} "
                      "points, ours lie end to end")
    elif args.patch_len >= 1 and args.seq_len % args.patch_len:  # a patch_len below 1: resolution says so
        unlike.append(f"--seq_len {args.seq_len} is no multiple of --patch_size {args.patch_len}: its patches leave "
                      "out the window's last points, ours its first")
    if args.test_pred_len != args.output_token_len:
        unlike.append(f"--test_pred_len {args.test_pred_len} with --output_token_len {args.output_token_len}: its head "
                      "forecasts --test_pred_len points, ours --output_token_len, rolled out")
    if unlike:
        raise ConfigError("OpenLTM's TTM differs from ours: " + "; ".join(unlike))


def check_channels(declared: dict, n_channels: int, covariate: bool, file: str) -> None:
    """--enc_in/--dec_in/--n_vars/--c_out are the data's channels (TSLib's MS scripts may say --c_out 1)."""
    for flag, value in declared.items():
        if value != n_channels and not (flag == "--c_out" and covariate and value == 1):
            raise ConfigError(f"{flag} {value}, but the model sees {n_channels} channel(s) of {file}: the data "
                              "sets it here; drop the flag or fix it")


def reference_markdown() -> str:
    """docs/tslib.md: every translated flag (a test keeps the file equal to this)."""
    lines = ["# Time-Series-Library and OpenLTM scripts", "",
             "Generated: `python -m exp.dialects > docs/tslib.md`. Their forecasting scripts run with "
             "our `run.py` unchanged (only the `python`/`torchrun` line differs): `--task_name long_term_forecast` "
             "or `short_term_forecast` selects TSLib's flags, `--task_name forecast` OpenLTM's. Flags both have "
             "(`--seq_len`, `--d_model`, "
             "`--lradj`, ...) mean the same; a script's omitted flags take its framework's defaults, below, so "
             "the run is the one the script describes, and its identity is that of the same command written "
             "with our flags. Any other unknown flag is an error naming it.", "",
             "| flag | from | here |", "|---|---|---|",
             "| `--task_name long_term_forecast` | TSLib | direct forecasting (`--nonautoregressive`) with TSLib's "
             "defaults |",
             "| `--task_name short_term_forecast` | TSLib | `--task short_term` (M4: `--data m4 "
             "--seasonal_patterns <subset>`; [short_term.md](short_term.md)) with TSLib's "
             "defaults; as its exp_short_term_forecasting, the subset's horizon H sets `--pred_len` H, `--seq_len` "
             "2H and `--label_len` H whatever the script says (noted where it says otherwise) |",
             "| `--task_name forecast` | OpenLTM | OpenLTM's defaults (autoregressive unless `--nonautoregressive`) |"]
    for f in FOREIGN:
        lines.append(f"| `{f.flag}` | {', '.join(f.dialects)} | {f.here} |")
    lines += ["", "## OpenLTM's TTM", "",
              "`--model ttm` in an OpenLTM script trains our TTM where it computes what OpenLTM's does: the TTM flags "
              "above set its hyper-parameters, its head drops out at `--dropout` (our `--head_dropout`, unless "
              "given), and `--test_pred_len` must equal `--output_token_len` (OpenLTM's head forecasts "
              "`--test_pred_len` points; ours forecasts `--output_token_len` and rolls out). OpenLTM's defaults mix "
              "channels in the backbone and cut overlapping patches, which ours does not: its own `ttm_etth1.sh` is "
              "refused, in one line naming `--mode` and `--stride`; with `--mode common_channel --stride` equal to "
              "`--patch_size` it runs.",
              "", "## What TSLib's code of a model fixes", "",
              "Whatever the script says, on every data set (M4 included), as TSLib's own model files do; flags "
              "only we have (`--head_dropout`, `--stride`, `--variant`), given explicitly, still win.", "",
              "| model | fixed |", "|---|---|"]
    for model, fixed in TSLIB_FIXED.items():
        lines.append(f"| `{model}` | " + ", ".join(f"`{k}` = {v}" for k, v in fixed.items()) + " |")
    lines += ["", "## Defaults of a script's omitted flags", "", "| flag | TSLib | OpenLTM |", "|---|---|---|"]
    for name in sorted({*DEFAULTS[TSLIB], *DEFAULTS[OPENLTM]}):
        cells = [f"`{DEFAULTS[d][name]}`" if name in DEFAULTS[d] else "ours" for d in (TSLIB, OPENLTM)]
        lines.append(f"| `--{name}` | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(reference_markdown())
