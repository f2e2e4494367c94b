"""Time-Series-Library and OpenLTM command lines, run unchanged: their flags translated into ours.

`--task_name long_term_forecast` (TSLib) or `--task_name forecast` (OpenLTM) selects the dialect. Its
defaults apply to the flags a script leaves out (a TSLib script that omits --e_layers trains TSLib's 2
layers, not our model's default), its flag names map to ours, flags without meaning here are explained
once in the log, and flags we cannot honour are refused with one line. What comes out is the native
command line the script means: a run's identity is the same whichever way it is written. docs/tslib.md
is generated from the table below (`python -m exp.dialects > docs/tslib.md`).
"""
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import models
from utils.errors import ConfigError

TSLIB, OPENLTM = "TSLib", "OpenLTM"
TASKS = {"long_term_forecast": TSLIB, "forecast": OPENLTM}

# The defaults of their run.py for the flags we share (TSLib fixes the seed to 2021 whatever --seed says)
DEFAULTS = {
    TSLIB: {"nonautoregressive": True, "seq_len": 96, "output_token_len": 96, "e_layers": 2, "d_layers": 1,
            "d_model": 512, "n_heads": 8, "d_ff": 2048, "dropout": 0.1, "activation": "gelu", "use_norm": True,
            "moving_avg": 25, "top_k": 5, "num_kernels": 6, "down_sampling_layers": 0, "down_sampling_window": 1,
            "individual": False, "freq": "h", "learning_rate": 1e-4, "batch_size": 32, "train_epochs": 10,
            "patience": 3, "lradj": "type1", "des": "test", "seed": 2021},
    OPENLTM: {"seq_len": 672, "input_token_len": 576, "output_token_len": 96, "test_pred_len": 96, "e_layers": 1,
              "d_model": 512, "n_heads": 8, "d_ff": 2048, "dropout": 0.1, "activation": "relu", "use_norm": False,
              "learning_rate": 1e-4, "batch_size": 32, "train_epochs": 10, "patience": 3, "lradj": "type1",
              "des": "test", "seed": 2021, "weight_decay": 0.0},
}
# What TSLib's implementation of a model fixes whatever its flags say (models/<Name>.py there): DLinear never
# normalises, PatchTST, iTransformer and TimesNet always do (TimeMixer reads --use_norm), and PatchTST's head
# drops out at --dropout. A flag name as value: that flag's value.
TSLIB_FIXED = {"dlinear": {"use_norm": False}, "patchtst": {"use_norm": True, "head_dropout": "--dropout"},
               "itransformer": {"use_norm": True}, "timesnet": {"use_norm": True}}
CHANNEL_FLAGS = ("enc_in", "dec_in", "c_out", "n_vars")


@dataclass
class Translation:
    dialect: str | None
    argv: list = field(default_factory=list)       # the native flags among the given ones
    defaults: dict = field(default_factory=dict)   # flag -> value our parser starts from
    mapped: dict = field(default_factory=dict)     # our flag -> the foreign flag that set it
    notes: list = field(default_factory=list)      # foreign flags accepted without effect, explained
    channels: dict = field(default_factory=dict)   # --enc_in/--dec_in/--c_out/--n_vars: checked against the data
    equal: dict = field(default_factory=dict)      # our flag -> (foreign flag, value) it must equal
    given: set = field(default_factory=set)        # our flags given explicitly


@dataclass(frozen=True)
class Foreign:
    flag: str
    dialects: tuple
    here: str                                      # what it becomes here (the docs' table)
    apply: Callable[[str, str, Translation], None]  # (flag, value, translation)
    switch: bool = False                           # takes no value


def _sets(dest: str, convert=lambda v: v):
    def apply(flag, value, t):
        t.defaults[dest], t.mapped[dest] = convert(value), flag
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
        _sets("covariate" if value == "MS" else "target_only", lambda v: True)(flag, value, t)


def _channels(flag, value, t):
    t.channels[flag] = _int(flag, value)


def _use_gpu(flag, value, t):
    if flag == "--no_use_gpu" or str(value).lower() in ("false", "0"):
        _sets("device", lambda v: "cpu")(flag, value, t)
    else:
        _note("the GPU is used when there is one (--device auto)")(flag, value, t)


def _gpu(flag, value, t):
    if _int(flag, value) != 0:
        raise ConfigError(f"{flag} {value}: each process uses cuda:LOCAL_RANK; run with CUDA_VISIBLE_DEVICES={value}")
    _note("each process uses cuda:LOCAL_RANK; CUDA_VISIBLE_DEVICES chooses the GPUs")(flag, value, t)


def _equal(dest: str):
    def apply(flag, value, t):
        t.equal[dest] = (flag, _int(flag, value))
    return apply


_BOTH = (TSLIB, OPENLTM)
_DDP = "DataParallel is not offered: launch torchrun --nproc_per_node=N run.py --ddp (docs/distributed.md)"
FOREIGN = [
    Foreign("--pred_len", (TSLIB,), "`--output_token_len`, tested at the same horizon", _sets("output_token_len", int)),
    Foreign("--label_len", (TSLIB,), "noted and ignored: no model here reads decoder start tokens",
            _note("ignored: no model here reads decoder start tokens (label_len)")),
    Foreign("--features", (TSLIB,), "`M`: all channels; `MS`: `--covariate`; `S`: `--target_only`", _features),
    *(Foreign(f"--{name}", (TSLIB,) if name != "n_vars" else (OPENLTM,),
              "checked against the data's channels (the data sets them)", _channels) for name in CHANNEL_FLAGS),
    Foreign("--embed", (TSLIB,), "`timeF` only (the time features TSLib's timeenc=1 builds)",
            _only(("timeF",), "the time features are TSLib's timeF", "only timeF time features are built here")),
    Foreign("--factor", _BOTH, "noted and ignored: attention here is full attention",
            _note("ignored: attention here is full attention (no ProbSparse/AutoCorrelation factor)")),
    Foreign("--use_norm", (TSLIB,), "`--use_norm` when 1 (TSLib's default), off when 0",
            _sets("use_norm", lambda v: v != "0")),
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
    Foreign("--loss", _BOTH, "`MSE` only", _only(("MSE", "mse"), "training minimises MSE",
                                                  "only MSE training is offered")),
    Foreign("--down_sampling_method", (TSLIB,), "`avg` only (TimeMixer pools by averaging)",
            _only(("avg",), "TimeMixer pools by averaging", "TimeMixer here pools by averaging only")),
    Foreign("--channel_independence", (TSLIB,), "1 only (TimeMixer here is channel-independent)",
            _only(("1",), "TimeMixer here is channel-independent", "TimeMixer here is channel-independent only")),
    Foreign("--decomp_method", (TSLIB,), "`moving_avg` only",
            _only(("moving_avg",), "decomposition by moving average", "decomposition by moving average only")),
    Foreign("--augmentation_ratio", (TSLIB,), "0 only", _only(("0",), "no augmentation", "augmentation is not offered")),
    Foreign("--inverse", (TSLIB,), "refused: metrics are on the scaled data, as in the papers' tables",
            _refuse("metrics are on the scaled data here, as in the papers' tables"), switch=True),
    Foreign("--use_dtw", (TSLIB,), "refused: add DTW as a metric file (docs/extending.md)",
            _refuse("DTW is not a metric here; add one in utils/metrics/ (docs/extending.md)"), switch=True),
    Foreign("--test_seq_len", (OPENLTM,), "must equal `--seq_len` (tests use the training lookback)",
            _equal("seq_len")),
    Foreign("--cosine", (OPENLTM,), "`--lradj cosine` (per epoch over `--train_epochs`; OpenLTM's eta_min 1e-8 is 0)",
            _sets("lradj", lambda v: "cosine"), switch=True),
    Foreign("--tmax", (OPENLTM,), "must equal `--train_epochs` (the cosine's period)", _equal("train_epochs")),
    Foreign("--test_flag", (OPENLTM,), "`T` only: the test split of `--data`",
            _only(("T",), "the test split of --data is used", "testing on another dataset is not offered")),
    Foreign("--load_time_stamp", (OPENLTM,), "`none` only",
            _only(("none",), "no precomputed time-stamp embeddings", "precomputed time-stamp embeddings are not offered")),
    Foreign("--output_attention", (OPENLTM,), "noted and ignored", _note("ignored: attention maps are not returned"),
            switch=True),
    Foreign("--flash_attention", (OPENLTM,), "noted and ignored: torch chooses the attention kernel",
            _note("ignored: torch's scaled_dot_product_attention chooses the kernel"), switch=True),
    Foreign("--AP_levels", (OPENLTM,), "`--ap_levels`", _sets("ap_levels", int)),
    Foreign("--d_mode", (OPENLTM,), "`--decoder_mode`", _sets("decoder_mode")),
    Foreign("--d_d_model", (OPENLTM,), "`--decoder_d_model`", _sets("decoder_d_model", int)),
    Foreign("--use_decoder", (OPENLTM,), "noted: TTM here always has its decoder",
            _note("TTM here always has its decoder"), switch=True),
]
_BY_FLAG = {f.flag: f for f in FOREIGN}
_BOOLEAN_VALUES = ("true", "false", "1", "0")


def dialect_of(argv: list) -> str | None:
    """The dialect --task_name selects (the last one given, as argparse would), None for our own flags."""
    dialect = None
    for i, token in enumerate(argv):
        name, eq, value = token.partition("=")
        if name == "--task_name":
            task = value if eq else argv[i + 1] if i + 1 < len(argv) else ""
            if task not in TASKS:
                raise ConfigError(f"--task_name {task}: the forecasting tasks are long_term_forecast (TSLib) and "
                                  "forecast (OpenLTM)")
            dialect = TASKS[task]
    return dialect


def translate(argv: list, option_dests: dict) -> Translation:
    """Split a command line into our flags and the dialect's; option_dests: our option string -> flag name."""
    t = Translation(dialect_of(argv))
    if t.dialect is None:
        t.argv = list(argv)
        return t
    t.defaults = dict(DEFAULTS[t.dialect])
    i = 0
    while i < len(argv):
        token = argv[i]
        name, eq, inline = token.partition("=")
        foreign = _BY_FLAG.get(name)
        if name == "--task_name":
            i += 1 if eq else 2
            continue
        if foreign is None or t.dialect not in foreign.dialects:
            if name in option_dests:
                t.given.add(option_dests[name])
            t.argv.append(token)
            i += 1
            continue
        if foreign.switch or (name == "--use_gpu" and not eq and
                              (i + 1 >= len(argv) or argv[i + 1].lower() not in _BOOLEAN_VALUES)):
            value, i = (inline or None), i + 1
        elif eq:
            value, i = inline, i + 1
        elif i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
        else:
            raise ConfigError(f"{name}: expected a value")
        foreign.apply(name, value, t)
    both = sorted(dest for dest in t.mapped if dest in t.given)
    if both:
        raise ConfigError(f"{t.mapped[both[0]]} and --{both[0]} both given: they set the same thing; keep one")
    return t


def complete(args, t: Translation) -> None:
    """What TSLib's code of the chosen model fixes, and the foreign flags that must agree with ours."""
    if t.dialect == TSLIB:
        try:
            fixed = TSLIB_FIXED.get(models.resolve(args.model), {})
        except KeyError:
            fixed = {}  # validate() reports the unknown model
        for dest, value in fixed.items():
            value = getattr(args, value[2:]) if isinstance(value, str) and value.startswith("--") else value
            if dest in t.mapped and getattr(args, dest) != value:
                t.notes.append(f"{t.mapped[dest]}: ignored, as by TSLib's {args.model} ({dest} is {value} there)")
            if dest not in t.given:
                setattr(args, dest, value)
    for dest, (flag, value) in t.equal.items():
        if getattr(args, dest) != value:
            raise ConfigError(f"{flag} {value} must equal --{dest} ({getattr(args, dest)}) here")


def check_channels(declared: dict, n_channels: int, covariate: bool, file: str) -> None:
    """--enc_in/--dec_in/--n_vars/--c_out are the data's channels (TSLib's MS scripts may say --c_out 1)."""
    for flag, value in declared.items():
        if value != n_channels and not (flag == "--c_out" and covariate and value == 1):
            raise ConfigError(f"{flag} {value}, but the model sees {n_channels} channel(s) of {file}: the data "
                              "sets it here; drop the flag or fix it")


def reference_markdown() -> str:
    """docs/tslib.md: every translated flag (a test keeps the file equal to this)."""
    lines = ["# Time-Series-Library and OpenLTM scripts", "",
             "Generated: `python -m exp.dialects > docs/tslib.md`. Their long-term-forecasting scripts run with "
             "our `run.py` unchanged (only the `python`/`torchrun` line differs): `--task_name long_term_forecast` "
             "selects TSLib's flags, `--task_name forecast` OpenLTM's. Flags both have (`--seq_len`, `--d_model`, "
             "`--lradj`, ...) mean the same; a script's omitted flags take its framework's defaults, below, so "
             "the run is the one the script describes, and its identity is that of the same command written "
             "with our flags. Any other unknown flag is an error naming it.", "",
             "| flag | from | here |", "|---|---|---|",
             "| `--task_name long_term_forecast` | TSLib | direct forecasting (`--nonautoregressive`) with TSLib's "
             "defaults |",
             "| `--task_name forecast` | OpenLTM | OpenLTM's defaults (autoregressive unless `--nonautoregressive`) |"]
    for f in FOREIGN:
        lines.append(f"| `{f.flag}` | {', '.join(f.dialects)} | {f.here} |")
    lines += ["", "## What TSLib's code of a model fixes", "",
              "Whatever the script says (as TSLib's own model files do); our flags given explicitly still win.", "",
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
