"""TimesFM 2.5 read from a checkpoint in its publisher's format forecasts what the publisher's API does."""
import json

import numpy as np
import pytest
import torch

import models

timesfm = pytest.importorskip("timesfm")
from safetensors.torch import load_file, save_file  # noqa: E402
from timesfm import ForecastConfig, configs  # noqa: E402
from timesfm.timesfm_2p5 import timesfm_2p5_base, timesfm_2p5_torch  # noqa: E402

# a tiny network in the layout of the published TimesFM_2p5_200M_Definition (sizes shrunk, deciles and the mean)
P, O, OS = 4, 8, 24  # noqa: E741 - # input patch, output patch (the native horizon), the quantile head's horizon
DEFINITION = timesfm_2p5_base.TimesFM_2p5_200M_Definition(
    input_patch_len=P, output_patch_len=O, output_quantile_len=OS,
    tokenizer=configs.ResidualBlockConfig(input_dims=2 * P, hidden_dims=16, output_dims=16, use_bias=True,
                                          activation="swish"),
    stacked_transformers=configs.StackedTransformersConfig(num_layers=2, transformer=configs.TransformerConfig(
        model_dims=16, hidden_dims=24, num_heads=2, attention_norm="rms", feedforward_norm="rms", qk_norm="rms",
        use_bias=False, use_rotary_position_embeddings=True, ff_activation="swish", fuse_qkv=True)),
    output_projection_point=configs.ResidualBlockConfig(input_dims=16, hidden_dims=16, output_dims=O * 10,
                                                        use_bias=False, activation="swish"),
    output_projection_quantiles=configs.ResidualBlockConfig(input_dims=16, hidden_dims=16, output_dims=OS * 10,
                                                            use_bias=False, activation="swish"))
RECOMMENDED = {"normalize_inputs": True, "use_continuous_quantile_head": True, "force_flip_invariance": True,
               "infer_is_positive": True, "fix_quantile_crossing": True}  # the model card's compile
PACKAGE_DEFAULTS = {name: getattr(ForecastConfig(), name) for name in RECOMMENDED}


class TinyModule(timesfm_2p5_torch.TimesFM_2p5_200M_torch_module):
    """The publisher's module, which reads its architecture from its class attribute `config`."""
    config = DEFINITION


@pytest.fixture(scope="module")
def publisher(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("timesfm-2.5-tiny"))


def make_checkpoint(folder):
    """A random TimesFM 2.5 made by the publisher's classes, saved by its save_pretrained (model.safetensors,
    config.json, README.md), and the publisher's API loaded from that folder by its from_pretrained."""
    with pytest.MonkeyPatch.context() as patch:  # its wrapper builds the module class its file names
        patch.setattr(timesfm_2p5_torch, "TimesFM_2p5_200M_torch_module", TinyModule)
        wrapper = timesfm_2p5_torch.TimesFM_2p5_200M_torch(torch_compile=False)
        torch.manual_seed(0)
        with torch.no_grad():  # every tensor random: the RMSNorm scales start at 0, which would mute the layers
            for parameter in wrapper.model.parameters():
                parameter.normal_(0.0, 0.3)
        wrapper.save_pretrained(folder)
        api = timesfm_2p5_torch.TimesFM_2p5_200M_torch.from_pretrained(str(folder), torch_compile=False)
    return str(folder), api


def ours(folder, seq_len, horizon, n_outputs=1, **hparams):
    found = models.model_class("timesfm").published(folder)
    task = {"seq_len": seq_len, "input_token_len": 8, "output_token_len": horizon, "enc_in": 3, "covariate": False,
            "n_outputs": n_outputs}
    model = models.build("timesfm", task, {**RECOMMENDED, "context_length": 16384, **found.hparams, **hparams})
    model.load_published(folder)
    return model.eval()


@pytest.mark.parametrize("seq_len,horizon,options,context_length,max_context", [
    (38, 5, RECOMMENDED, 16384, 40),  # within the native horizon (8); 38 points: padded to whole patches
    (38, 20, RECOMMENDED, 16384, 40),  # beyond it: two output patches' medians fed back
    (38, 20, RECOMMENDED, 16384, 1024),  # the API compiled for longer contexts: more masked padding
    (38, 20, PACKAGE_DEFAULTS, 16, 16),  # ForecastConfig's own defaults; the window cut to its last 16 points
    (40, 8, {**RECOMMENDED, "force_flip_invariance": False, "infer_is_positive": False}, 16384, 40),
])
def test_forecasts_equal_the_publishers_api(publisher, seq_len, horizon, options, context_length, max_context):
    """TimesFM_2p5_200M_torch.compile(ForecastConfig(...)) then .forecast(horizon, inputs): its quantile_forecast
    (the mean, then the deciles) and its point_forecast (the median), each channel a series of its own."""
    folder, api = publisher
    torch.manual_seed(1)
    x = torch.randn(2, seq_len, 3).cumsum(1) * 3 + 10  # (batch, time, channels): series with a level and a scale
    x[..., 0] = x[..., 0].abs()  # a channel with no negative point: infer_is_positive clips its forecast at 0
    api.compile(ForecastConfig(max_context=max_context, max_horizon=horizon, per_core_batch_size=6, **options))
    point, quantiles = api.forecast(horizon, list(x.transpose(1, 2).reshape(6, seq_len).double().numpy()))
    point = torch.from_numpy(point).float().reshape(2, 3, horizon).transpose(1, 2)
    quantiles = torch.from_numpy(quantiles).float().reshape(2, 3, horizon, 10).transpose(1, 2)[..., 1:]
    with torch.no_grad():
        wide = ours(folder, seq_len, horizon, n_outputs=9, context_length=context_length, **options)(x)
        narrow = ours(folder, seq_len, horizon, context_length=context_length, **options)(x)
    torch.testing.assert_close(wide, quantiles, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(narrow, point, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(narrow, wide[..., 4], rtol=0, atol=0)  # the median, the API's point forecast


def test_the_published_weights_are_loaded_key_by_key(publisher):
    folder, _ = publisher
    published = load_file(f"{folder}/model.safetensors")
    loaded = ours(folder, 40, 8).state_dict()
    assert loaded.keys() == {f"network.{k}" for k in published}
    assert all(torch.equal(loaded[f"network.{k}"], published[k]) for k in published)


def test_the_architecture_comes_from_the_checkpoint_and_the_defaults_are_the_published_one(publisher):
    folder, _ = publisher
    model = models.model_class("timesfm")
    found = model.published(folder)
    assert found.hparams == {"d_model": 16, "n_heads": 2, "e_layers": 2, "d_ff": 24, "patch_len": P, "horizon": O,
                             "quantile_horizon": OS, "quantile_levels": "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9"}
    assert found.max_seq_len == 16384 - O and found.task == {}
    assert model.published(f"{folder}/model.safetensors") == found  # the file itself, as the publisher reads it
    from models.timesfm import definition
    assert definition(model.Config()) == timesfm_2p5_base.TimesFM_2p5_200M_Definition()  # google's 200M


def test_training_forecasts_the_same_and_is_differentiable_beyond_the_native_horizon(publisher):
    """The API runs under no_grad; ours trains: with gradients (each step running the whole sequence rather than the
    key-value cache) it forecasts what the API does, and every parameter gets a gradient through the fed-back
    patches."""
    folder, api = publisher
    torch.manual_seed(2)
    x = torch.randn(2, 38, 3) * 4 + 1
    api.compile(ForecastConfig(max_context=40, max_horizon=20, per_core_batch_size=6, **RECOMMENDED))
    _, quantiles = api.forecast(20, list(x.transpose(1, 2).reshape(6, 38).double().numpy()))
    model = ours(folder, 38, 20, n_outputs=9).train()
    out = model(x)
    expected = torch.from_numpy(quantiles).float().reshape(2, 3, 20, 10).transpose(1, 2)[..., 1:]
    torch.testing.assert_close(out.detach(), expected, rtol=1e-5, atol=1e-5)
    out.square().mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_a_folder_that_is_not_a_timesfm_checkpoint_is_refused_naming_what_it_is(tmp_path):
    published = models.model_class("timesfm").published
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5", "chronos_pipeline_class": "x"}))
    with pytest.raises(ValueError, match=r"expected a TimesFM 2\.5 checkpoint .*found a folder of config.json; "
                                         r"a config.json of model_type t5"):
        published(str(tmp_path))
    save_file({"encoder.weight": torch.zeros(2, 2)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match=r"expected a TimesFM 2\.5 checkpoint .*found .*model_type t5; "
                                         r"model.safetensors of 1 tensors \(encoder.weight"):
        published(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(np.arange(8, dtype=np.uint8).tobytes())
    with pytest.raises(ValueError, match=r"expected a TimesFM 2\.5 checkpoint .*found a model.safetensors that "
                                         r"safetensors cannot read"):
        published(str(tmp_path))
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("")
    with pytest.raises(ValueError, match=r"expected a TimesFM 2\.5 checkpoint .*found a folder of notes.txt"):
        published(str(other))
