"""--tracker mlflow|wandb for real: MLflow into a local file store, W&B offline; what they hold is read back with
MLflow's client and from the offline run's own records (W&B's protobuf), and compared with history and metrics.json."""
import pytest

from exp.config import parse_args, resolve
from utils import trackers
from utils.errors import ConfigError


def test_an_unknown_tracker_and_a_missing_package_are_one_line_errors(monkeypatch):
    monkeypatch.setattr(trackers, "find_spec", lambda name: object())  # whether installed here or not
    assert resolve(parse_args(["--tracker", "mlflow", "--tracker", "wandb,mlflow"])).tracker == ("mlflow", "wandb")
    with pytest.raises(ConfigError, match=r"^unknown --tracker 'nope'; available: mlflow, wandb$"):
        resolve(parse_args(["--tracker", "nope"]))
    monkeypatch.setattr(trackers, "find_spec", lambda name: None if name == "wandb" else object())
    with pytest.raises(ConfigError) as missing:
        resolve(parse_args(["--tracker", "mlflow,wandb"]))
    assert str(missing.value) == "--tracker wandb needs the wandb package: pip install -r requirements-trackers.txt"
