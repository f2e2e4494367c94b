"""What the models that read published checkpoints share: their publishers' packages, imported when a run needs
them, and the checkpoint folders' configuration files."""
import importlib
import json
import os

import torch

from models.base import hparam

REQUIREMENTS = "pip install -r requirements-foundation.txt"


def package(module: str, distribution: str):
    """The publisher's module, or ValueError with the one command that installs it (the registry and resolution turn
    it into one line)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(f"needs the package {distribution}: {REQUIREMENTS}") from None


def read_config(path: str, what: str) -> dict:
    """config.json of a Hugging Face model folder; ValueError naming what was expected where it is not one."""
    file = os.path.join(path, "config.json")
    if not os.path.isfile(file):
        found = "a file" if os.path.isfile(path) else \
            f"a folder of {', '.join(sorted(os.listdir(path))[:5]) or 'nothing'}"
        raise ValueError(f"expected {what} (a Hugging Face model folder with config.json), found {found}")
    with open(file) as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{file} is not JSON: {e}") from None


def levels(text: str) -> tuple:
    """A comma-separated list of quantile levels as floats in (0, 1)."""
    try:
        found = tuple(float(level) for level in text.split(","))
    except ValueError:
        raise ValueError(f"quantile_levels must be comma-separated numbers, got {text!r}") from None
    if not all(0 < q < 1 for q in found) or list(found) != sorted(set(found)):
        raise ValueError(f"quantile_levels must increase within (0, 1), got {text!r}")
    return found


def quantile_outputs(configs) -> tuple:
    """(levels, index of the median) of a model that forecasts the fixed quantile_levels: it returns all of them
    (n_outputs = their number: --loss quantile at those --quantiles) or their median (n_outputs 1: a point loss)."""
    found = levels(configs.quantile_levels)
    if configs.n_outputs not in (1, len(found)):
        raise ValueError(f"forecasts {len(found)} quantiles ({configs.quantile_levels}) or their median: --loss "
                         f"quantile with those --quantiles, or a point loss (not {configs.n_outputs} values per point)")
    if 0.5 not in found:
        raise ValueError(f"quantile_levels {configs.quantile_levels}: the median (0.5), the point forecast, is not "
                         "among them")
    return found, found.index(0.5)


# the hyper-parameters the published forecasters share: one definition, one help text
def quantile_levels_hparam(default: str = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9"):
    return hparam(default, "the quantiles a forecast gives (a published checkpoint's own); --loss quantile must ask "
                  "for these", tiny="0.1,0.3,0.5,0.7,0.9")


def context_length_hparam(default: int, tiny: int):
    return hparam(default, "the most points of context a forecast reads: a longer window is cut to its last ones "
                           "(the model's docstring says how it reads a shorter one)", tiny=tiny, low=1)


def horizon_hparam(default: int, tiny: int):
    return hparam(default, "points one forward forecasts: a longer forecast goes on from them as the model's "
                           "publisher does (its docstring says how)", tiny=tiny, low=1)


def mapped_state(weights: dict, names: dict, ours: dict, what: str) -> dict:
    """A state dict of ours from a publisher's: `names` maps each of our keys to the publisher's keys that make it
    (several are concatenated in their order: q, k and v into one projection); `ours` is our state dict, whose shapes
    each must have. ValueError naming the keys missing, unexpected or of another shape (`what`: the tensors expected,
    e.g. "a Timer of e_layers 8 and 1 output heads")."""
    expected = {key for parts in names.values() for key in parts}
    missing, unexpected = sorted(expected - weights.keys()), sorted(weights.keys() - expected)
    if missing or unexpected:
        listed = [f"{kind} {', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''}"
                  for kind, keys in (("missing", missing), ("unexpected", unexpected)) if keys]
        raise ValueError(f"expected the tensors of {what}; found {'; '.join(listed)}")
    state = {}
    for name, parts in names.items():
        state[name] = torch.cat([weights[key] for key in parts]) if len(parts) > 1 else weights[parts[0]]
        if state[name].shape != ours[name].shape:
            shapes = ", ".join(f"{key} {tuple(weights[key].shape)}" for key in parts)
            raise ValueError(f"the checkpoint's {shapes} do not fit this model's {name} {tuple(ours[name].shape)}")
    return state


def load_safetensors(model: torch.nn.Module, path: str, what: str) -> None:
    """A Hugging Face folder's model.safetensors into `model` (Timer, Sundial, Moirai: its published(), its
    architecture, its from_published()), after its configuration is checked to be the model's: n_heads shows in no
    tensor's shape."""
    folder = os.path.dirname(path) if os.path.isfile(path) else path
    found = model.published(folder).hparams  # ValueError naming what it found where it is not such a checkpoint
    differ = [f"{k} {v} (this model's {model.architecture[k]})" for k, v in found.items() if v != model.architecture[k]]
    if differ:
        raise ValueError(f"the checkpoint's architecture is not this model's: {', '.join(differ)}")
    file = os.path.join(folder, "model.safetensors")
    if not os.path.isfile(file):
        raise ValueError(f"expected {what} with its weights in model.safetensors; found no such file in {folder}")
    safetensors = package("safetensors.torch", "safetensors")
    model.load_state_dict(model.from_published(safetensors.load_file(file)), strict=True)
