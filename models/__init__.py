"""Model registry: every module in this package except base, contract and layers is a model, keyed by its file name.

Drop `models/my_model.py` with a `Model(nn.Module)` class (its `capabilities`, and a `Config` dataclass of
its hyper-parameters) and `--model my_model` trains it. A module is imported when it is first needed; one
that fails to import, or lacks what a model declares, fails only the runs that choose it, with one line
naming the file.
"""
import dataclasses
import importlib
import pkgutil
from types import SimpleNamespace

from models.base import TASK_FIELDS, Capabilities, hparam

_SKIP = {"base", "contract", "layers"}
NAMES = tuple(sorted(info.name for info in pkgutil.iter_modules(__path__)
                     if info.name not in _SKIP and not info.name.startswith("_")))
_loaded = {}


class ModelFileError(ValueError):
    """A file in models/ that cannot serve as a model: the message names the file and what is wrong."""


def resolve(name: str) -> str:
    """Registry key for a model name, case- and dash-insensitive (DLinear -> dlinear, Timer-XL -> timer_xl, N-BEATS
    -> nbeats)."""
    key = name.lower().replace("-", "_")
    if key not in NAMES and key.replace("_", "") in NAMES:
        key = key.replace("_", "")
    if key not in NAMES:
        raise KeyError(name)
    return key


def model_class(name: str):
    """The Model class of models/<name>.py, imported and checked on first use."""
    key = resolve(name)
    if key not in _loaded:
        _loaded[key] = _load(key)
    if isinstance(_loaded[key], ModelFileError):
        raise _loaded[key]
    return _loaded[key]


def _load(key: str):
    where = f"models/{key}.py"
    try:
        module = importlib.import_module(f"{__name__}.{key}")
    except Exception as e:  # noqa: BLE001 - any failure of a user's model file is reported, not raised through
        return ModelFileError(f"{where} cannot be imported: {type(e).__name__}: {e}")
    model = getattr(module, "Model", None)
    if model is None:
        return ModelFileError(f"{where} defines no Model class")
    if not isinstance(getattr(model, "capabilities", None), Capabilities):
        return ModelFileError(f"{where}: Model.capabilities must be a models.base.Capabilities")
    caps = model.capabilities
    if caps.future_marks and not caps.time_marks:
        return ModelFileError(f"{where}: Capabilities future_marks needs time_marks")
    if caps.exogenous and not caps.covariate:
        return ModelFileError(f"{where}: Capabilities exogenous needs covariate")
    if caps.stateful and not caps.autoregressive:
        return ModelFileError(f"{where}: Capabilities stateful needs autoregressive")
    config = getattr(model, "Config", None)
    if config is not None and not dataclasses.is_dataclass(config):
        return ModelFileError(f"{where}: Model.Config must be a dataclass of hyper-parameters (models.base.hparam)")
    for f in hyperparameter_fields(model):
        if "help" not in f.metadata:  # a plain field (`hidden: int = 64`): a flag of its own, with no range
            if f.default is dataclasses.MISSING:
                return ModelFileError(f"{where}: Config field {f.name!r} needs a default, e.g. "
                                      f"{f.name} = models.base.hparam(64, 'what it sets')")
            f.metadata = hparam(f.default, f"{f.name} (a plain Config field of {where})").metadata
    revision = getattr(model, "revision", 1)
    if not isinstance(revision, int) or isinstance(revision, bool) or revision < 1:
        return ModelFileError(f"{where}: Model.revision must be a positive int, got {revision!r}")
    clash = sorted(set(TASK_FIELDS) & {f.name for f in hyperparameter_fields(model)})
    if clash:
        return ModelFileError(f"{where}: Config fields {clash} are task fields the framework sets")
    return model


def hyperparameter_fields(model) -> tuple:
    """The dataclass fields of a Model's Config (none when it declares no Config)."""
    return dataclasses.fields(model.Config) if getattr(model, "Config", None) else ()


def loadable() -> dict:
    """name -> Model class or ModelFileError, for every file in models/ (the parser needs every model's flags)."""
    found = {}
    for name in NAMES:
        try:
            found[name] = model_class(name)
        except ModelFileError as e:
            found[name] = e
    return found


def capabilities(name: str) -> Capabilities:
    return model_class(name).capabilities


def revision(name: str) -> int:
    """Model.revision (default 1): raised when a change to a model file changes its results, so that runs of
    the earlier code keep an identity of their own."""
    return getattr(model_class(name), "revision", 1)


def later_hyperparameters(name: str) -> dict:
    """The hyper-parameters models/<name>.py declares hparam(later=True), with their defaults (the model as it was
    before them)."""
    return {f.name: f.default for f in hyperparameter_fields(model_class(name)) if f.metadata["later"]}


def tiny_hyperparameters(name: str) -> dict:
    """Every hyper-parameter of models/<name>.py at its small value (hparam's tiny): the contract test's model, and
    any check that only needs the model to run."""
    return {f.name: f.metadata["tiny"] for f in hyperparameter_fields(model_class(name))}


def hyperparameters(name: str) -> tuple:
    """Names of the hyper-parameters models/<name>.py declares."""
    return tuple(f.name for f in hyperparameter_fields(model_class(name)))


def build(name: str, task: dict, hparams: dict):
    """The model for a task (TASK_FIELDS; n_outputs 1 and autoregressive unless given) with its hyper-parameters: all
    it is told of the run."""
    model = model_class(name)
    return model(SimpleNamespace(**{"n_outputs": 1, "nonautoregressive": False,
                                    **{k: task[k] for k in TASK_FIELDS if k in task}}, **hparams))
