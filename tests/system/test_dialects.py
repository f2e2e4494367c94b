"""Time-Series-Library and OpenLTM scripts run unchanged: written as their scripts write them, they train the
configuration our own flags describe (one identity), and what cannot be honoured is one clear line."""
import pytest

import run
from tests.unit.test_dialects import NATIVE, TSLIB_SCRIPTS, _argv


@pytest.mark.parametrize("model", sorted(TSLIB_SCRIPTS))
def test_a_tslib_script_trains_and_our_flags_test_its_checkpoint(weather, tmp_path, model, capfd):
    outputs = ["--checkpoints", str(tmp_path / "ckpt"), "--results_dir", str(tmp_path / "results")]
    trained = run.main(_argv(TSLIB_SCRIPTS[model], weather, *outputs))[0]["metrics"]
    log = capfd.readouterr().err
    assert (model == "Informer") != ("--label_len 12: ignored: this model reads no decoder start tokens" in log)
    tested = run.main(_argv(NATIVE[model], weather, *outputs, "--is_training", "0"))[0]["metrics"]
    assert tested["setting"] == trained["setting"] and tested["mse"] == trained["mse"]
