"""Checkpoints: atomic writes by the main rank, safe strict loads on every rank."""
import pickle

import torch
from torch import nn

from utils.errors import ConfigError
from utils.files import write_atomic


def trainable_state(model: nn.Module, state: dict | None = None) -> dict:
    """Trainable parameters and buffers of the model's state (default: its state_dict()); frozen parameters
    (partial fine-tuning) stay out."""
    frozen = {name for name, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}  # tied too
    return {k: v for k, v in (model.state_dict() if state is None else state).items() if k not in frozen}


def load_trainable_state(model: nn.Module, state: dict, source: str = "checkpoint") -> None:
    """Strict load of the trainable set (matching_state)."""
    model.load_state_dict(matching_state(model, state, source), strict=False)


def matching_state(model: nn.Module, state: dict, source: str = "checkpoint") -> dict:
    """`state` without 'module.' prefixes, once checked to be the model's trainable set: every expected key
    present, no stranger keys, every shape equal."""
    state = {k.removeprefix("module."): v for k, v in state.items()}
    expected, own = set(trainable_state(model)), model.state_dict()
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - set(own))
    if missing or unexpected:
        raise ConfigError(f"{source} does not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
    shapes = [f"{k} {tuple(v.shape)} vs {tuple(own[k].shape)}" for k, v in state.items()
              if hasattr(v, "shape") and v.shape != own[k].shape]
    if shapes:
        raise ConfigError(f"{source} does not match the model: shapes differ ({'; '.join(shapes[:3])})")
    return state


class _KeepWriteError:
    """A file for torch.save that keeps the OSError its write raised: torch's zip writer reports a failed write
    (a full disk) as a RuntimeError without the cause, depending on where in the file it fails."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def _save(payload: dict, f) -> None:
    out = _KeepWriteError(f)
    try:
        torch.save(payload, out)
    except RuntimeError:
        if out.error is None:
            raise
        raise out.error from None


def save_atomic(payload: dict, path: str) -> None:
    """Temporary file, fsync, rename: a crash mid-save never leaves a torn checkpoint, a full disk one line."""
    write_atomic(path, lambda f: _save(payload, f))


def save_lazily(make_payload, path: str) -> None:
    save_atomic(make_payload(), path)


def load(path: str, device: torch.device = torch.device("cpu"), mmap: bool = False) -> dict:
    """weights_only=True: a checkpoint that would run code when unpickled is refused. mmap: tensors are mapped,
    not read (cheap for reading what a checkpoint records)."""
    try:
        return torch.load(path, map_location=device, weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise ConfigError(f"checkpoint not found: {path}") from None
    except pickle.UnpicklingError as e:
        raise ConfigError(f"refusing to load {path}: it is not a plain weights file ({str(e).splitlines()[0]})") \
            from None
    except (RuntimeError, EOFError, OSError) as e:
        raise ConfigError(f"cannot read checkpoint {path}: {str(e).splitlines()[0]}") from None
