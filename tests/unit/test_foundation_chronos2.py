"""Chronos-2 read from a checkpoint in its publisher's format forecasts what the publisher's pipeline does."""
import contextlib
import json
import shutil

import pytest
import torch

import models
from tests.published import assert_training_forecasts_alike_with_gradients, load

chronos = pytest.importorskip("chronos")
from chronos.chronos2 import Chronos2CoreConfig, Chronos2Model, Chronos2Pipeline  # noqa: E402

LEVELS = [0.01, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9,
          0.95, 0.99]
# a tiny checkpoint in the layout of amazon/chronos-2's config.json (sizes shrunk; its 21 quantile levels): 2 output
# patches of 8 points per forward, so a native horizon of 16
PUBLISHED = {"architectures": ["Chronos2Model"], "chronos_pipeline_class": "Chronos2Pipeline",
             "chronos_config": {"context_length": 48, "input_patch_size": 8, "input_patch_stride": 8,
                                "output_patch_size": 8, "max_output_patches": 2, "quantiles": LEVELS,
                                "time_encoding_scale": 48, "use_arcsinh": True, "use_reg_token": True},
             "d_ff": 32, "d_kv": 8, "d_model": 16, "dense_act_fn": "relu", "dropout_rate": 0.1,
             "feed_forward_proj": "relu", "initializer_factor": 0.05, "is_gated_act": False,
             "layer_norm_epsilon": 1e-06, "model_type": "t5", "num_heads": 2, "num_layers": 2, "pad_token_id": 0,
             "reg_token_id": 1, "rope_theta": 10000.0, "vocab_size": 2}
NATIVE = 16


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return str(make_checkpoint(tmp_path_factory.mktemp("chronos-2-tiny")))


def make_checkpoint(folder, quantiles=LEVELS):
    """A random Chronos-2 made by the publisher's class and saved as a published one is."""
    torch.manual_seed(0)
    config = {**PUBLISHED, "chronos_config": {**PUBLISHED["chronos_config"], "quantiles": list(quantiles)}}
    Chronos2Model(Chronos2CoreConfig(**config)).save_pretrained(folder)
    return folder


def ours(folder, seq_len, horizon, n_outputs=1, channels=3):
    return load("chronos2", folder, seq_len, horizon, n_outputs, channels)


def series(batch, seq_len, channels, seed=1):
    torch.manual_seed(seed)
    return torch.randn(batch, seq_len, channels).cumsum(1) * 3 + 10  # (batch, time, channels): a level and a scale


def beyond(horizon):
    """The pipeline warns beyond its native horizon."""
    return pytest.warns(UserWarning, match="prediction length") if horizon > NATIVE else contextlib.nullcontext()


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("seq_len,horizon", [(48, 16), (60, 40), (20, 7)])
def test_forecasts_equal_the_publishers_pipeline(checkpoint, seq_len, horizon, channels):
    """Within the native horizon (16), beyond it (the quantile paths fed back, one and two output patches a forward),
    with a context longer than the checkpoint reads (60 > 48) and one not a whole number of patches (20); the window's
    channels are one multivariate task of the pipeline's 3-D tensor input."""
    x = series(4, seq_len, channels)
    pipeline = Chronos2Pipeline.from_pretrained(checkpoint)
    with beyond(horizon):
        quantiles, mean = pipeline.predict_quantiles(x.transpose(1, 2), prediction_length=horizon,
                                                     quantile_levels=LEVELS)
    expected = torch.stack(quantiles).transpose(1, 2)  # (batch, time, channels, Q)
    with torch.no_grad():
        wide = ours(checkpoint, seq_len, horizon, n_outputs=21, channels=channels)(x)
        point = ours(checkpoint, seq_len, horizon, channels=channels)(x)
    torch.testing.assert_close(wide, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(point, torch.stack(mean).transpose(1, 2), rtol=1e-5, atol=1e-5)  # the median


def test_windows_are_forecast_in_the_pipelines_batches(checkpoint):
    """More series than one of the pipeline's batches (256): chunks of whole tasks, as it batches them."""
    x = series(90, 20, 3)
    expected = torch.stack(Chronos2Pipeline.from_pretrained(checkpoint).predict(x.transpose(1, 2), prediction_length=8))
    with torch.no_grad():
        out = ours(checkpoint, 20, 8, n_outputs=21)(x)
    torch.testing.assert_close(out, expected.permute(0, 3, 1, 2), rtol=1e-5, atol=1e-5)


def test_covariate_mode_is_the_pipelines_target_with_past_covariates(checkpoint):
    """--covariate: the last channel is the target of the pipeline's dict input, the others its past covariates; their
    forecasts are the network's own for those rows (the 3-D tensor input with the target first)."""
    x, horizon = series(4, 60, 3), 40
    found = models.model_class("chronos2").published(checkpoint)
    task = {"seq_len": 60, "output_token_len": horizon, "enc_in": 3, "covariate": True, "n_outputs": 21,
            "nonautoregressive": True}
    model = models.build("chronos2", task, {**found.defaults, **found.hparams})
    model.load_published(checkpoint)
    pipeline = Chronos2Pipeline.from_pretrained(checkpoint)
    inputs = [{"target": window[:, 2], "past_covariates": {"c0": window[:, 0], "c1": window[:, 1]}} for window in x]
    with beyond(horizon):
        target = torch.stack(pipeline.predict(inputs, prediction_length=horizon))[:, 0]  # (batch, Q, time)
    with beyond(horizon):
        rows = torch.stack(pipeline.predict(x[..., [2, 0, 1]].transpose(1, 2), prediction_length=horizon))
    with torch.no_grad():
        out = model.eval()(x)  # (batch, time, channels, Q)
    torch.testing.assert_close(out[:, :, 2], target.transpose(1, 2), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[:, :, :2], rows[:, 1:].permute(0, 3, 1, 2), rtol=1e-5, atol=1e-5)


def test_beyond_the_horizon_levels_without_the_pipelines_unrolled_ones_unroll_all_levels(tmp_path):
    """A checkpoint without all of 0.1, ..., 0.9, which the pipeline's default refuses, unrolls all its levels:
    the pipeline with unrolled_quantiles=its levels."""
    own = [0.1, 0.3, 0.5, 0.7, 0.9]
    folder = str(make_checkpoint(tmp_path, quantiles=own))
    pipeline, x = Chronos2Pipeline.from_pretrained(folder), series(2, 30, 3)
    with pytest.raises(ValueError, match="Unrolled quantiles must be a subset"):
        pipeline.predict(x.transpose(1, 2), prediction_length=24)
    with beyond(24):
        expected = torch.stack(pipeline.predict(x.transpose(1, 2), prediction_length=24, unrolled_quantiles=own))
    with torch.no_grad():
        out = ours(folder, 30, 24, n_outputs=5)(x)
    torch.testing.assert_close(out, expected.permute(0, 3, 1, 2), rtol=1e-5, atol=1e-5)


def test_training_forecasts_alike_with_gradients(checkpoint):
    """Fine-tuning trains through the whole forecast, the quantile paths fed back included (at --dropout 0: the
    checkpoint's dropout 0.1 is active in training, as in the publisher's fit)."""
    found = models.model_class("chronos2").published(checkpoint)
    task = {"seq_len": 30, "output_token_len": 24, "enc_in": 3, "n_outputs": 21, "nonautoregressive": True}
    model = models.build("chronos2", task, {**found.hparams, "dropout": 0.0})
    model.load_published(checkpoint)
    assert_training_forecasts_alike_with_gradients(model, series(2, 30, 3))


def test_the_published_weights_are_loaded_key_by_key(checkpoint):
    from safetensors.torch import load_file
    published = load_file(f"{checkpoint}/model.safetensors")
    loaded = ours(checkpoint, 48, 16).chronos.state_dict()
    assert loaded.keys() == published.keys()
    assert all(torch.equal(loaded[k], published[k]) for k in published)


def test_a_checkpoint_missing_a_tensor_is_refused(checkpoint, tmp_path):
    from safetensors.torch import load_file, save_file
    tensors = load_file(f"{checkpoint}/model.safetensors")
    del tensors["shared.weight"]
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(f"{checkpoint}/config.json", tmp_path / "config.json")
    with pytest.raises(ValueError, match="expected every tensor .*shared.weight"):
        ours(str(tmp_path), 48, 16)


def test_the_architecture_comes_from_the_checkpoint(checkpoint):
    found = models.model_class("chronos2").published(checkpoint)
    assert found.hparams == {"d_model": 16, "d_ff": 32, "d_kv": 8, "n_heads": 2, "e_layers": 2, "patch_len": 8,
                             "context_length": 48, "horizon": 16, "time_encoding_scale": 48,
                             "quantile_levels": ",".join(str(q) for q in LEVELS)}
    assert found.max_seq_len == 48 and found.defaults == {"dropout": 0.1}  # a flag may change the dropout


def test_the_defaults_are_amazon_chronos_2s_architecture(tmp_path):
    """config.json of amazon/chronos-2 (its architecture; the package's Chronos2CoreConfig defaults are not it)."""
    published = {**PUBLISHED, "d_model": 768, "d_kv": 64, "d_ff": 3072, "num_heads": 12, "num_layers": 12,
                 "chronos_config": {**PUBLISHED["chronos_config"], "context_length": 8192, "input_patch_size": 16,
                                    "input_patch_stride": 16, "output_patch_size": 16, "max_output_patches": 64,
                                    "time_encoding_scale": 8192}}
    (tmp_path / "config.json").write_text(json.dumps(published))
    found = models.model_class("chronos2").published(str(tmp_path))
    defaults = {f.name: f.default for f in models.hyperparameter_fields(models.model_class("chronos2"))}
    assert defaults == {**found.hparams, **found.defaults}


def test_a_folder_of_another_model_is_refused_naming_what_it_is(tmp_path):
    bolt = {"architectures": ["ChronosBoltModelForForecasting"], "chronos_pipeline_class": "ChronosBoltPipeline",
            "model_type": "t5", "d_model": 512}
    (tmp_path / "config.json").write_text(json.dumps(bolt))
    with pytest.raises(ValueError, match="expected a Chronos-2 checkpoint .* found ChronosBoltPipeline"):
        models.model_class("chronos2").published(str(tmp_path))
    (tmp_path / "config.json").unlink()
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="expected a Chronos-2 checkpoint .*found a folder of weights.bin"):
        models.model_class("chronos2").published(str(tmp_path))
