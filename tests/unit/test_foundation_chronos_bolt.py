"""Chronos-Bolt read from a checkpoint in its publisher's format forecasts what the publisher's pipeline does."""
import json

import pytest
import torch

import models
from tests.published import load

chronos = pytest.importorskip("chronos")
from chronos.chronos_bolt import ChronosBoltModelForForecasting, ChronosBoltPipeline  # noqa: E402
from transformers import T5Config  # noqa: E402

# a tiny checkpoint in the layout of amazon/chronos-bolt-small's config.json (sizes shrunk, quantiles 0.1..0.9)
PUBLISHED = {"architectures": ["ChronosBoltModelForForecasting"], "chronos_pipeline_class": "ChronosBoltPipeline",
             "chronos_config": {"context_length": 48, "input_patch_size": 8, "input_patch_stride": 8,
                                "prediction_length": 16, "quantiles": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
                                "use_reg_token": True},
             "d_ff": 32, "d_kv": 8, "d_model": 16, "decoder_start_token_id": 0, "dense_act_fn": "relu",
             "dropout_rate": 0.1, "eos_token_id": 1, "feed_forward_proj": "relu", "initializer_factor": 0.05,
             "is_encoder_decoder": True, "is_gated_act": False, "layer_norm_epsilon": 1e-06, "model_type": "t5",
             "num_decoder_layers": 2, "num_heads": 2, "num_layers": 2, "pad_token_id": 0,
             "relative_attention_max_distance": 128, "relative_attention_num_buckets": 32, "vocab_size": 2}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return str(make_checkpoint(tmp_path_factory.mktemp("chronos-bolt-tiny")))


def make_checkpoint(folder):
    """A random Chronos-Bolt made by the publisher's class and saved as a published one is."""
    torch.manual_seed(0)
    ChronosBoltModelForForecasting(T5Config(**PUBLISHED)).save_pretrained(folder)
    return folder


def ours(folder, seq_len, horizon, n_outputs=1):
    return load("chronos_bolt", folder, seq_len, horizon, n_outputs)


@pytest.mark.parametrize("seq_len,horizon", [(48, 16), (60, 40), (20, 7)])
def test_forecasts_equal_the_publishers_pipeline(checkpoint, seq_len, horizon):
    """Within the native horizon (16), beyond it (the pipeline's quantile paths fed back) and with a context longer
    than the checkpoint reads (60 > 48) or not a whole number of patches (20)."""
    torch.manual_seed(1)
    x = torch.randn(4, seq_len, 3).cumsum(1) * 3 + 10  # (batch, time, channels): series with a level and a scale
    pipeline = ChronosBoltPipeline.from_pretrained(checkpoint)
    with pytest.warns(UserWarning) if horizon > 16 else _no_warning():
        expected = pipeline.predict(x.transpose(1, 2).reshape(12, seq_len), prediction_length=horizon)  # (12, Q, T)
    expected = expected.reshape(4, 3, 9, horizon).permute(0, 3, 1, 2)
    with torch.no_grad():
        quantiles = ours(checkpoint, seq_len, horizon, n_outputs=9)(x)
        point = ours(checkpoint, seq_len, horizon)(x)
    torch.testing.assert_close(quantiles, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(point, expected[..., 4], rtol=1e-5, atol=1e-5)  # the median, the pipeline's point


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_the_published_weights_are_loaded_key_by_key(checkpoint):
    published = ChronosBoltModelForForecasting.from_pretrained(checkpoint).state_dict()
    loaded = ours(checkpoint, 48, 16).chronos.state_dict()
    assert loaded.keys() == published.keys()
    assert all(torch.equal(loaded[k], published[k]) for k in published)


def test_the_architecture_comes_from_the_checkpoint(checkpoint):
    found = models.model_class("chronos_bolt").published(checkpoint)
    assert found.hparams == {"d_model": 16, "d_ff": 32, "d_kv": 8, "n_heads": 2, "e_layers": 2, "d_layers": 2,
                             "patch_len": 8, "context_length": 48, "horizon": 16,
                             "quantile_levels": "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9"}
    assert found.max_seq_len == 48 and found.defaults == {"dropout": 0.1}  # a flag may change the dropout


def test_a_folder_of_another_model_is_refused_naming_what_it_is(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5", "d_model": 512}))
    with pytest.raises(ValueError, match="expected a Chronos-Bolt checkpoint .* found t5"):
        models.model_class("chronos_bolt").published(str(tmp_path))
    (tmp_path / "config.json").unlink()
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="expected a Chronos-Bolt checkpoint .*found a folder of weights.bin"):
        models.model_class("chronos_bolt").published(str(tmp_path))
