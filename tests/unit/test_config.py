"""The run's configuration: resolved once, by section, then frozen; flags added later leave earlier identities as
they were."""
import dataclasses
import os

import pytest
import torch

from exp.config import SECTIONS, RunConfig, Sections, parse_args, resolve, section_types
from exp.flags import later_flags, roles
from exp.identity import make_identity, run_config
from tests.unit.test_identity import DLINEAR, _Data
from utils import trackers


def _resolved(*flags):
    return resolve(parse_args([*DLINEAR, *flags]))


def test_nothing_assigns_to_a_resolved_configuration():
    config = _resolved("--batch_size", "8")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.batch_size = 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.sections.training.batch_size = 16
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.origin.adopted = None
    assert config.batch_size == config.sections.training.batch_size == config.as_dict()["batch_size"] == 8


def test_resolution_completes_a_copy_of_the_draft(monkeypatch):
    monkeypatch.setattr(trackers, "find_spec", lambda name: object())  # whether installed here or not
    draft = parse_args(["--model", "DLinear", "--nonautoregressive", "--output_token_len", "24", "--tracker",
                        "mlflow,mlflow"])
    config = resolve(draft)
    assert (draft.model, draft.test_pred_len, draft.tracker) == ("DLinear", None, ["mlflow,mlflow"]), "as given"
    assert (config.model, config.test_pred_len, config.target, config.tracker) == ("dlinear", 24, "OT", ("mlflow",))


def test_every_flag_is_in_exactly_one_section_its_role():
    assert tuple(f.name for f in dataclasses.fields(Sections)) == SECTIONS
    in_sections = {section: {f.name for f in dataclasses.fields(section_types()[section])} for section in SECTIONS}
    for name, role in roles().items():
        assert [section for section in SECTIONS if name in in_sections[section]] == [role], name
    assert not set(roles()) & ({f.name for f in dataclasses.fields(RunConfig)} | {"as_dict"}), "no flag hides them"
    config = _resolved()
    assert config.as_dict() == {name: getattr(getattr(config.sections, role), name) for name, role in roles().items()}
    assert not hasattr(config, "dialect"), "what is not a flag is in config.origin"
    for name, value in config.as_dict().items():  # as declared: int, float, bool, str, a tuple of names; or None
        declared = next(f.type for f in dataclasses.fields(section_types()[roles()[name]]) if f.name == name)
        assert isinstance(value, declared), (name, value, declared)


def test_a_dialect_is_recorded_in_the_origin_not_the_flags():
    config = resolve(parse_args(["--task_name", "long_term_forecast", "--model", "DLinear", "--data", "ETTh1",
                                 "--features", "M", "--enc_in", "7", "--pred_len", "24"]))
    assert (config.origin.dialect, dict(config.origin.declared_channels)) == ("TSLib", {"--enc_in": 7})
    assert (config.nonautoregressive, config.output_token_len, config.test_pred_len) == (True, 24, 24)


def _checkpoint(root, config) -> str:
    """A run folder whose checkpoint records the identity of `config` (no weights: adoption reads only that)."""
    identity = make_identity(config, _Data, 1, config.seed)
    os.makedirs(root / identity.setting)
    torch.save({"identity": dataclasses.asdict(identity)}, root / identity.setting / "checkpoint.pth")
    return identity


def test_test_dir_adopts_the_recorded_flags_into_a_frozen_configuration(tmp_path):
    identity = _checkpoint(tmp_path, _resolved("--use_norm", "--seed", "7", "--model_id", "normed",
                                               "--output_token_len", "24"))
    draft = parse_args(["--is_training", "0", "--checkpoints", str(tmp_path), "--test_dir", identity.setting])
    config = resolve(draft)
    assert (config.model, config.nonautoregressive, config.use_norm, config.output_token_len, config.model_id,
            config.seed) == ("dlinear", True, True, 24, "normed", 7)
    assert config.test_pred_len == 24, "completed from the adopted flags"
    assert config.origin.adopted == identity and draft.model == "timer_xl"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.model = "timer_xl"


def test_test_dir_adopts_a_hyperparameter_added_later_at_the_value_its_checkpoint_had(tmp_path):
    timer_xl = ["--seq_len", "96", "--input_token_len", "24", "--output_token_len", "24"]
    identity = _checkpoint(tmp_path, resolve(parse_args(timer_xl)))
    assert "attention_form" not in identity.config["model"]
    config = resolve(parse_args(["--is_training", "0", "--checkpoints", str(tmp_path), "--test_dir", identity.setting,
                                 "--attention_form", "openltm"]))
    assert config.attention_form == "paper"
# A flag added later, and a value off its default; a new one is added here too (the test checks that it is)
LATER = {"val_windows": ["--val_windows", "20"], "train_steps": ["--train_steps", "30"],
         "val_every": ["--train_steps", "30", "--val_every", "10"], "fsdp": ["--ddp", "--fsdp"],
         "amp_dtype": ["--use_amp", "--amp_dtype", "fp16"],
         "date_format": ["--date_format", "%Y-%m-%d"], "dayfirst": ["--dayfirst"],
         "fill_missing": ["--fill_missing", "ffill"], "loss": ["--loss", "mae"], "protocol": ["--protocol", "tfb"],
         "quantiles": ["--quantiles", "0.1,0.5,0.9"],
         "finetune": ["--adaptation", "--pretrain_model_path", __file__, "--finetune", "head"],
         **{name: ["--adaptation", "--pretrain_model_path", __file__, "--finetune", "lora", f"--{name}", "4"]
            for name in ("lora_rank", "lora_alpha")},
         **{name: ["--task", "short_term", "--data", "m4", "--seasonal_patterns", "Weekly", *more]
            for name, more in (("task", []), ("seasonal_patterns", []),
                               ("lookback_multiple", ["--lookback_multiple", "3"]),
                               ("history_multiple", ["--history_multiple", "5"]))}}


@pytest.mark.parametrize("name", sorted(LATER))
def test_a_flag_added_later_enters_the_identity_only_off_its_default(name):
    # --pretrained enters as its checkpoint's fingerprint: tests/integration/test_foundation.py
    assert set(LATER) | {"pretrained"} == set(later_flags())
    at_default = run_config(_resolved(), "f.csv", "123-abc", 1)
    assert name not in at_default[roles()[name]], "the runs recorded before it keep their identity"
    off = _resolved(*LATER[name])
    value = getattr(off, name)  # as JSON records it: a tuple as a list
    assert run_config(off, "f.csv", "123-abc", 1)[roles()[name]][name] == (list(value) if type(value) is tuple
                                                                            else value)
