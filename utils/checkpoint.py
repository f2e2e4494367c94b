"""Checkpoints: atomic writes by the main rank, safe strict loads on every rank."""
import os
import pickle
import random

import numpy as np
import torch
from torch import nn

from utils.errors import ConfigError


def trainable_state(model: nn.Module) -> dict:
    """Trainable parameters and buffers; frozen parameters (partial fine-tuning) stay out."""
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    return {k: v for k, v in model.state_dict().items() if k not in frozen}


def load_trainable_state(model: nn.Module, state: dict) -> None:
    """Strict load of the trainable set: every expected key present and no stranger keys."""
    state = {k.removeprefix("module."): v for k, v in state.items()}
    expected = set(trainable_state(model))
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - set(model.state_dict()))
    if missing or unexpected:
        raise ConfigError(f"checkpoint does not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.load_state_dict(state, strict=False)


def save_atomic(payload: dict, path: str) -> None:
    """Write to a temporary file, fsync, then rename: a crash mid-save never leaves a torn checkpoint."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_lazily(make_payload, path: str) -> None:
    save_atomic(make_payload(), path)


def load(path: str, device: torch.device) -> dict:
    """weights_only=True: a checkpoint that would run code when unpickled is refused."""
    if not os.path.isfile(path):
        raise ConfigError(f"checkpoint not found: {path}")
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as e:
        raise ConfigError(f"refusing to load {path}: it is not a plain weights file ({str(e).splitlines()[0]})") \
            from None
    except (RuntimeError, EOFError) as e:
        raise ConfigError(f"cannot read checkpoint {path}: {e}") from None


def rng_state() -> dict:
    """Every random generator a run draws from, in types weights_only loading accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": [kind, keys.tolist(), pos, has_gauss, gauss], "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])
