"""Sharded model states (--fsdp) and activation checkpointing: FSDP trains like DDP, its checkpoints are those
of any other run, a sharded run resumes exactly, and recomputing activations changes no number."""
import run
from tests.conftest import elsewhere

METRICS = ("mse", "mae", "rmse", "mape", "mspe")
NO_TIMES = ("train_seconds", "eval_seconds")


def _rows(result) -> list:
    return [{k: v for k, v in row.items() if k not in NO_TIMES} for row in result["history"]]


def test_activation_checkpointing_changes_no_number(tiny_args, tmp_path):
    """Dropout on: the recomputation draws the masks of the forward again."""
    args = tiny_args + ["--e_layers", "2", "--dropout", "0.1"]
    plain = run.main(args)[0]
    recomputed = run.main(args + ["--activation_checkpointing"] + elsewhere(tmp_path, "ac"))[0]
    assert _rows(recomputed) == _rows(plain)
    assert recomputed["metrics"]["setting"] == plain["metrics"]["setting"]  # not part of what a run is
    for k in METRICS:
        assert recomputed["metrics"][k] == plain["metrics"][k], k
