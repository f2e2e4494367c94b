"""--finetune: what each mode trains, on small modules with a fake configuration; the fingerprint of a folder; the
blocks --fsdp shards in every model that reads a published checkpoint."""
import os
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import models
from exp.pretrained import adapt, reads_published
from utils.errors import ConfigError
from utils.fingerprints import tree_fingerprint


class TwoLayers(nn.Module):
    head_modules = ("out",)

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8))
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        return self.out(self.body(x))


def _config(finetune, model="two_layers", rank=2):
    return SimpleNamespace(finetune=finetune, model=model, lora_rank=rank, lora_alpha=4.0)


def test_full_trains_everything_and_head_only_the_declared_head():
    assert all(p.requires_grad for p in adapt(TwoLayers(), _config("full")).parameters())
    model = adapt(TwoLayers(), _config("head"))
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {"out.weight", "out.bias"}


def test_lora_adds_adapters_on_every_linear_layer_that_start_as_the_model_and_train_alone():
    pytest.importorskip("peft")
    torch.manual_seed(0)
    plain = TwoLayers()
    model = adapt(TwoLayers(), _config("lora"))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {f"{m}.lora_{ab}.default.weight" for m in ("body.0", "body.2", "out") for ab in "AB"}
    for name, module in (("body.0", model.body[0]), ("out", model.out)):
        assert module.lora_A["default"].weight.shape[0] == 2, name  # rank 2
    x = torch.randn(3, 4)
    plain.load_state_dict({k.replace(".base_layer", ""): v for k, v in model.state_dict().items() if "lora_" not in k})
    torch.testing.assert_close(model(x), plain(x))  # B starts at zero: the adapted model is the pretrained one


def test_what_cannot_be_fine_tuned_that_way_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="--finetune head: model convs declares no output head"):
        adapt(nn.Sequential(nn.Conv1d(1, 1, 3)), _config("head", "convs"))
    pytest.importorskip("peft")
    with pytest.raises(ConfigError, match="--finetune lora adapts linear layers: model convs has none"):
        adapt(nn.Sequential(nn.Conv1d(1, 1, 3)), _config("lora", "convs"))


def test_a_folder_fingerprint_covers_every_file_but_hidden_ones(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    os.makedirs(tmp_path / "sub")
    (tmp_path / "sub" / "w.bin").write_bytes(b"1234")
    first = tree_fingerprint(str(tmp_path))
    os.makedirs(tmp_path / ".cache")
    (tmp_path / ".cache" / "lock").write_text("x")
    assert tree_fingerprint(str(tmp_path)) == first
    (tmp_path / "sub" / "w.bin").write_bytes(b"1235")
    assert tree_fingerprint(str(tmp_path)) != first
    (tmp_path / "sub" / "w.bin").write_bytes(b"1234")
    assert tree_fingerprint(str(tmp_path)) == first
    (tmp_path / "sub" / "w.bin").rename(tmp_path / "w.bin")
    assert tree_fingerprint(str(tmp_path)) != first  # a moved file is another checkpoint
    assert tree_fingerprint(str(tmp_path / "w.bin")) != first  # a file is fingerprinted as a file


PUBLISHED = [name for name in models.NAMES if reads_published(name)]


@pytest.mark.parametrize("name", PUBLISHED)
def test_fsdp_shards_each_published_models_blocks(name):
    """Every such model is sharded block by block (its layers an nn.ModuleList it calls), not as one unit."""
    from tests.unit.test_models import build, inputs
    from utils.fsdp import blocks
    model = build(name, 2, models.capabilities(name).direct).eval()
    x, marks, kwargs = inputs(name, 1, 2)
    with torch.no_grad():
        found = blocks(model, lambda: model(x, marks, **kwargs))
    assert found, name
