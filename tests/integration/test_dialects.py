"""Time-Series-Library and OpenLTM scripts run unchanged: written as their scripts write them, they train the
configuration our own flags describe (one identity), and what cannot be honoured is one clear line."""
import numpy as np
import pytest

import run
from exp.config import parse_args
from tests.unit.test_dialects import TSLIB_SCRIPTS, _argv, _config
from utils.errors import ConfigError


def test_features_s_and_ms_read_the_target_alone_or_all_channels_into_it(weather, tmp_path):
    tslib = _argv(TSLIB_SCRIPTS["DLinear"], weather)
    single = tslib[:tslib.index("--enc_in")] + tslib[tslib.index("--des"):]
    assert _config([*single, "--features", "S"]) == _config([*single, "--target_only"])
    assert _config([*tslib, "--features", "MS", "--model", "iTransformer"]) == \
        _config([*tslib, "--covariate", "--model", "iTransformer"])
    with pytest.raises(ConfigError, match="--enc_in 3, but the model sees 1 channel"):
        run.main([*tslib, "--features", "S"])
    np.savetxt(tmp_path / "solar_AL.txt", np.random.default_rng(0).random((300, 3)), delimiter=",")
    solar = parse_args([*single, "--data", "Solar", "--root_path", str(tmp_path), "--data_path", "solar_AL.txt",
                        "--features", "S"])
    assert not solar.target_only, "TSLib's Solar and PEMS loaders read every channel whatever --features says"
