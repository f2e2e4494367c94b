"""Published checkpoints (--pretrained) and what fine-tuning trains (--finetune).

    resolve_published(draft)   # config resolution: the architecture the checkpoint fixes becomes the flags', once
    load_published(model, c)   # build time: its weights into the model built from those flags
    adapt(model, c)            # build time: freeze all but the head, or add LoRA adapters (peft)

A model reads its publisher's format through its own `published` and `load_published` (models/base.Published).
"""
import logging
import os
import re

from torch import nn

import models
from models.layers.published import REQUIREMENTS
from utils.errors import ConfigError

log = logging.getLogger(__name__)

def reads_published(name: str) -> bool:
    model = models.model_class(name)
    return callable(getattr(model, "published", None)) and callable(getattr(model, "load_published", None))


def resolve_published(draft, default_of) -> None:
    """Set the draft's model hyper-parameters and task lengths to what --pretrained's checkpoint has. A flag left at
    its default takes the checkpoint's value; one given otherwise must agree, or resolution stops with one line
    naming the flag and the value it needs. default_of(name): the value a flag has when not given."""
    path = draft.pretrained
    if path is None:
        return
    if not reads_published(draft.model):
        readers = [n for n in models.NAMES if _safe_reads_published(n)]
        raise ConfigError(f"--pretrained: model {draft.model} reads no published checkpoint; those that do: "
                          f"{', '.join(readers)}")
    if not os.path.exists(path):
        raise ConfigError(f"--pretrained {path}: no such file or folder")
    try:
        found = models.model_class(draft.model).published(path)
    except ValueError as e:
        raise ConfigError(f"--pretrained {path}: {e}") from None
    except ImportError as e:
        raise ConfigError(f"model {draft.model} needs {e.name or e}: {REQUIREMENTS}") from None
    for name, value in {**found.hparams, **found.task}.items():
        given = getattr(draft, name)
        if given is not None and given != default_of(name) and given != value:
            raise ConfigError(f"--{name} {given}: the checkpoint at {path} has {name} {value}; give --{name} {value} "
                              "or leave the flag out")
        setattr(draft, name, value)
    for name, value in found.defaults.items():
        if getattr(draft, name) in (None, default_of(name)):
            setattr(draft, name, value)
    if found.max_seq_len is not None and draft.seq_len > found.max_seq_len:
        raise ConfigError(f"--seq_len {draft.seq_len}: the checkpoint at {path} reads at most {found.max_seq_len} "
                          f"points of context; give --seq_len {found.max_seq_len} or less")


def _safe_reads_published(name: str) -> bool:
    try:
        return reads_published(name)
    except models.ModelFileError:
        return False


def load_published(model: nn.Module, config) -> None:
    try:
        model.load_published(config.pretrained)
    except ValueError as e:
        raise ConfigError(f"--pretrained {config.pretrained}: {e}") from None
    log.info("loaded the published weights of %s from %s", config.model, config.pretrained)


def adapt(model: nn.Module, config) -> nn.Module:
    """The model as --finetune trains it: whole (full); its output head alone, the rest frozen (head); or with LoRA
    adapters of rank lora_rank on every linear layer, everything but the adapters frozen (lora). Frozen parameters
    stay out of the optimizer and of the run's checkpoints (utils/checkpoint.trainable_state): they are the
    pretrained weights, which are part of the run's identity."""
    if config.finetune == "full":
        return model
    if config.finetune == "head":
        present = dict(model.named_modules())
        names = [name for name in getattr(type(model), "head_modules", ()) if name in present]
        if not names:
            raise ConfigError(f"--finetune head: model {config.model} declares no output head (Model.head_modules)")
        model.requires_grad_(False)
        for name in names:
            model.get_submodule(name).requires_grad_(True)
        return model
    targets = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not targets:
        raise ConfigError(f"--finetune lora adapts linear layers: model {config.model} has none")
    try:
        from peft import LoraConfig, inject_adapter_in_model
    except ImportError:
        raise ConfigError(f"--finetune lora needs peft: {REQUIREMENTS}") from None
    model.requires_grad_(False)
    # a pattern of the exact names: a list would also match any module whose name merely ends in one of them
    pattern = "|".join(re.escape(name) for name in targets)
    model = inject_adapter_in_model(LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha,
                                               target_modules=pattern), model)
    log.info("LoRA rank %d on %d linear layers", config.lora_rank, len(targets))
    return model
