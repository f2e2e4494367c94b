"""Model registry: every module in this package that defines `Model` is a model, keyed by its file name.

Drop `models/my_model.py` with a `Model(nn.Module)` class and it can be trained with `--model my_model`.
"""
import importlib
import pkgutil

from models.base import Capabilities

_SKIP = {"base", "layers"}


def _discover() -> dict:
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in _SKIP or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "Model"):
            found[info.name] = module.Model
    return found


MODELS = _discover()


def resolve(name: str) -> str:
    """Registry key for a model name, case- and dash-insensitive (DLinear -> dlinear, Timer-XL -> timer_xl)."""
    key = name.lower().replace("-", "_")
    if key not in MODELS:
        raise KeyError(name)
    return key


def capabilities(name: str) -> Capabilities:
    return MODELS[resolve(name)].capabilities


def build(name: str, config):
    return MODELS[resolve(name)](config)
