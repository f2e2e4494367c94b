"""TiRex read from a checkpoint in its publisher's format forecasts what the publisher's forecast API does."""
import os

import pytest
import torch

import models
from tests.published import assert_training_forecasts_alike_with_gradients, load

tirex = pytest.importorskip("tirex")
from tirex.models.slstm.layer import sLSTMBlockConfig  # noqa: E402
from tirex.models.tirex import TiRexZero  # noqa: E402

# a tiny checkpoint in the layout of NX-AI/TiRex's model.ckpt (sizes shrunk: patches of 8, a context of 48, 9 quantiles)
PUBLISHED = {"model_config": {"input_patch_size": 8, "output_patch_size": 8,
                              "quantiles": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
                              "block_kwargs": {"embedding_dim": 16, "num_heads": 2, "num_blocks": 2,
                                               "ffn_proj_factor": 2.6667},
                              "input_ff_dim": 24},
             "train_ctx_len": 48}
# where the publisher's load_model finds it: it reads the model's name (TiRex) from the path's second part
LOCAL = os.path.join("NX-AI", "TiRex", "model.ckpt")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("tirex-tiny"))


def make_checkpoint(folder):
    """A random TiRex made by the publisher's class and saved as the published one is: a Lightning checkpoint whose
    blocks sit under block_stack. (the publisher's on_load_checkpoint renames them)."""
    torch.manual_seed(0)
    network = TiRexZero(backend="torch", **PUBLISHED)
    with torch.no_grad():
        for parameter in network.parameters():  # TiRexZero leaves the sLSTM weights empty for a checkpoint to fill
            parameter.normal_(0.0, 0.3)
    state = {("block_stack." + k if k.startswith("blocks.") else k): v for k, v in network.state_dict().items()}
    os.makedirs(folder / "NX-AI" / "TiRex")
    torch.save({"hyper_parameters": PUBLISHED, "state_dict": state, "pytorch-lightning_version": "2.5.0"},
               folder / LOCAL)
    return folder / "NX-AI" / "TiRex"  # what huggingface-cli download NX-AI/TiRex --local-dir gives: model.ckpt


@pytest.fixture(scope="module")
def publishers(checkpoint):
    """The publisher's model, loaded by its own load_model from the local file."""
    cwd = os.getcwd()
    os.chdir(checkpoint.parent.parent)
    try:
        return tirex.load_model(LOCAL, device="cpu", backend="torch")
    finally:
        os.chdir(cwd)


def ours(folder, seq_len, horizon, n_outputs=1):
    return load("tirex", folder, seq_len, horizon, n_outputs)


@pytest.mark.parametrize("seq_len,horizon", [(48, 8), (60, 21), (20, 5)])
def test_forecasts_equal_the_publishers_forecast_api(checkpoint, publishers, seq_len, horizon):
    """Within the native output patch (8) and beyond it (masked patches appended), with a context longer than the
    checkpoint reads (60 > 48: cut) or shorter and not a whole number of patches (20: padded with masked points)."""
    torch.manual_seed(1)
    x = torch.randn(4, seq_len, 3).cumsum(1) * 3 + 10  # (batch, time, channels): series with a level and a scale
    expected, median = publishers.forecast(x.transpose(1, 2).reshape(12, seq_len), prediction_length=horizon)
    expected, median = expected.reshape(4, 3, horizon, 9).transpose(1, 2), median.reshape(4, 3, horizon).transpose(1, 2)
    with torch.no_grad():
        quantiles = ours(str(checkpoint), seq_len, horizon, n_outputs=9)(x)
        point = ours(str(checkpoint / "model.ckpt"), seq_len, horizon)(x)  # the folder or its model.ckpt
    torch.testing.assert_close(quantiles, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(point, median, rtol=1e-5, atol=1e-5)  # the median, the API's point forecast
    assert not torch.equal(quantiles[..., 0], quantiles[..., 8])


def test_training_mode_is_the_forecast_with_gradients(checkpoint):
    """The forecast beyond the native patch from a padded context, in training mode, is differentiable: finite
    gradients reach every parameter."""
    assert_training_forecasts_alike_with_gradients(ours(str(checkpoint), 20, 21, n_outputs=9),
                                                   torch.randn(2, 20, 3).cumsum(1))


def test_the_published_weights_are_loaded_key_by_key(checkpoint, publishers):
    saved = torch.load(checkpoint / "model.ckpt", weights_only=True)["state_dict"]
    saved = {k.replace("block_stack.", ""): v for k, v in saved.items()}
    loaded = ours(str(checkpoint), 48, 8).tirex.state_dict()
    assert loaded.keys() == saved.keys() == publishers.state_dict().keys()
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)


def test_the_architecture_comes_from_the_checkpoint(checkpoint):
    found = models.model_class("tirex").published(str(checkpoint))
    assert found.hparams == {"d_model": 16, "n_heads": 2, "e_layers": 2, "input_ff_dim": 24, "ffn_proj_factor": 2.6667,
                             "patch_len": 8, "context_length": 48,
                             "quantile_levels": "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9"}
    assert found.max_seq_len == 48 and found.task == {} and found.defaults == {}
    assert sLSTMBlockConfig.__dataclass_fields__["ffn_proj_factor"].default == 2.6667  # where a checkpoint omits it


def test_a_path_that_is_not_a_tirex_checkpoint_is_refused_naming_what_it_is(tmp_path):
    published = models.model_class("tirex").published
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="expected a TiRex checkpoint .*found a folder of config.json"):
        published(str(tmp_path))
    (tmp_path / "model.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="expected a TiRex checkpoint .*found a file torch.load cannot read"):
        published(str(tmp_path))
    torch.save({"state_dict": {"w": torch.zeros(1)}, "epoch": 3}, tmp_path / "model.ckpt")
    with pytest.raises(ValueError, match=r"expected a TiRex checkpoint .*found a checkpoint of \['epoch', 'state_"):
        published(str(tmp_path))
    torch.save({"state_dict": {}, "hyper_parameters": {"d_model": 512}}, tmp_path / "model.ckpt")
    with pytest.raises(ValueError, match="expected a TiRex checkpoint .*found hyper_parameters {'d_model': 512}"):
        published(str(tmp_path / "model.ckpt"))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_under_autocast_the_slstm_keeps_its_own_precision(checkpoint, dtype):
    """--use_amp: fp16 autocast once cast the cells' matmuls to float16 beside their bfloat16 states, and torch.stack
    refused the mix. The cells now run outside autocast: the forecast is finite, and equal to the cells' own precision
    inside autocast for the rest of the network."""
    torch.manual_seed(2)
    x = torch.randn(2, 48, 3).cumsum(1)
    model = ours(str(checkpoint), 48, 16, n_outputs=9)
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        forecast = model(x)
    assert torch.isfinite(forecast).all()
    cell = model.tirex.blocks[0].slstm_layer.slstm_cell
    assert type(cell).__mro__[1] is tirex.models.slstm.cell.sLSTMCell, "the publisher's cell, its forward wrapped"
    inputs = torch.randn(2, 6, 4 * 16, dtype=dtype)
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        inside = cell(inputs, None)
    with torch.no_grad():
        outside = type(cell).__mro__[1].forward(cell, inputs, None)
    torch.testing.assert_close(inside, outside, rtol=0, atol=0)


def test_the_recurrence_per_head_is_the_publishers_forward_and_backward():
    """slstm_recurrence replaces the publisher's broadcast product (a copy of the recurrent kernel per series and
    step, each kept by autograd) with one per head: the same states and input gradients, bit for bit in the cells'
    bfloat16; the kernel's gradient, summed over the series in another order, within bfloat16's epsilon of its
    largest entry."""
    from tirex.models.slstm.cell import sLSTMCellTorch

    from models.tirex import slstm_recurrence
    torch.manual_seed(3)
    steps, series, heads, head_dim = 7, 5, 3, 8
    width = heads * head_dim

    def run(forward):
        x = torch.randn(steps, series, 4 * width).bfloat16().requires_grad_()
        R = (0.3 * torch.randn(heads, head_dim, 4 * head_dim)).bfloat16().requires_grad_()
        b = torch.randn(4 * width).requires_grad_()
        states = torch.zeros(4, series, width, dtype=torch.bfloat16)
        output, last = forward(x, states, R, b)
        (output.float().square().sum() + last.float().sum()).backward()
        return output, last, x.grad, R.grad, b.grad

    torch.manual_seed(3)
    publishers = run(sLSTMCellTorch.slstm_forward)
    torch.manual_seed(3)
    mine = run(lambda *a: slstm_recurrence(*a, pointwise=sLSTMCellTorch.slstm_forward_pointwise))
    for a, b in zip(mine[:3] + mine[4:], publishers[:3] + publishers[4:]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    scale = publishers[3].abs().max().item()
    torch.testing.assert_close(mine[3], publishers[3], rtol=0, atol=2 ** -7 * scale)  # bfloat16's epsilon


def test_a_training_step_keeps_no_copy_of_the_recurrent_kernel_per_series(checkpoint):
    """What autograd keeps for a backward through one forecast: the publisher's product kept heads x head_dim x 4
    head_dim values for every series at every step (an H200 ran out at batch 32); now the kernel is kept once."""
    model = ours(str(checkpoint), 48, 8)
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t.numel()) or t, lambda t: t):
        model(torch.randn(64, 48, 1).cumsum(1))
    cell = model.tirex.blocks[0].slstm_layer.slstm_cell
    per_series_copy = cell._recurrent_kernel_.numel() * 64
    assert max(kept) < per_series_copy, "a copy of the recurrent kernel for every series was kept"
