"""A run's identity: what enters it, one folder per identity, and the checks on what a checkpoint was trained as."""
import csv
import json
import os
import signal

import numpy as np
import pytest
import torch

import run
from data_provider import synthetic
from tests.conftest import metrics_of, run_dirs
from tests.unit.test_identity import DLINEAR
from utils import checkpoint, interrupt
from utils.errors import ConfigError


def test_a_data_file_edited_in_the_middle_is_another_run_and_never_tests_the_old_checkpoint(tiny_args, tmp_path):
    """A file beyond the old fingerprint's 2 x 64 KiB of ends; one value in its middle changed, the length and the
    modification time kept: the same command trains a run of its own, and testing the old run on it is refused."""
    flags = tiny_args + DLINEAR + ["--train_epochs", "1", "--seq_len", "96"] + _custom_file(tmp_path / "d", 1, 4000)
    path = tmp_path / "d" / "data.csv"
    assert path.stat().st_size > 3 * (1 << 16)
    first = run.main(flags)[0]["metrics"]
    text, before = path.read_text(), path.stat()
    lines = text.splitlines(keepends=True)
    middle = len(lines) // 2
    date, value, rest = lines[middle].split(",", 2)
    assert value[-1] != "7"
    lines[middle] = ",".join([date, value[:-1] + "7", rest])
    path.write_text("".join(lines))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    second = run.main(flags)[0]["metrics"]  # not "this run has already finished"
    assert second["config_id"] != first["config_id"]
    assert second["config"]["data"]["fingerprint"] != first["config"]["data"]["fingerprint"]
    with pytest.raises(ConfigError, match="it was trained with other flags: fingerprint: "):
        run.main(flags + ["--is_training", "0", "--test_dir", first["setting"]])
    assert json.load(open(tmp_path / "results" / first["setting"] / "tp16" / "metrics.json"))["mse"] == first["mse"]


def _custom_file(folder, seed, length=602):
    os.makedirs(folder, exist_ok=True)
    synthetic.write_csv(synthetic.generate(length=length, n_covariates=2, seed=seed), str(folder / "data.csv"))
    return ["--data", "custom", "--root_path", str(folder), "--data_path", "data.csv"]


def test_runs_on_two_files_of_one_name_get_their_own_folders(tiny_args, tmp_path):
    flags = tiny_args + DLINEAR + ["--train_epochs", "1"]
    a = run.main(flags + _custom_file(tmp_path / "a", seed=1))[0]["metrics"]
    b = run.main(flags + _custom_file(tmp_path / "b", seed=2))[0]["metrics"]
    assert a["setting"] != b["setting"] and a["checkpoint"] != b["checkpoint"]
    assert a["config"]["data"]["fingerprint"] != b["config"]["data"]["fingerprint"]
    assert len(run_dirs(tmp_path / "results")) == 2


def test_testing_checks_what_the_checkpoint_was_trained_as(tiny_args, tmp_path):
    """use_norm: refused when left out, found from the hint; --test_dir rebuilds the model as trained. An .npy
    checkpoint of one channel is never scored on a CSV of three."""
    normed = run.main(tiny_args + DLINEAR + ["--use_norm", "--train_epochs", "1"])[0]["metrics"]
    with pytest.raises(ConfigError, match=r"no checkpoint at .*runs of this model on this data: "
                                          rf"{normed['setting']} \(use_norm: True -> False\)"):
        run.main(tiny_args + DLINEAR + ["--train_epochs", "1", "--is_training", "0"])
    again = run.main(tiny_args + ["--is_training", "0", "--test_dir", normed["setting"]])[0]["metrics"]
    assert again["mse"] == pytest.approx(normed["mse"], rel=1e-6) and again["config"]["model"]["use_norm"] is True
    np.save(tmp_path / "one.npy", np.sin(np.arange(600) / 5.0)[:, None])
    npy = ["--data", "custom", "--root_path", str(tmp_path), "--data_path", "one.npy"]
    trained = run.main(tiny_args + DLINEAR + npy + ["--train_epochs", "1", "--model_id", "npy"])[0]["metrics"]
    with pytest.raises(ConfigError, match=r"cannot test .* other flags: .*file: one.npy -> tiny.csv"):
        run.main(tiny_args + ["--is_training", "0", "--test_dir", trained["setting"]])


def test_a_models_revision_past_the_first_is_part_of_the_identity(tiny_args, monkeypatch):
    """A model file whose results changed raises its revision: runs of the earlier code keep their own identity,
    and their checkpoints are not tested as the new model's."""
    import models
    first = run.main(tiny_args + DLINEAR + ["--train_epochs", "1"])[0]["metrics"]
    assert "revision" not in first["config"]["model"]  # revision 1 adds nothing: older identities stand
    monkeypatch.setattr(models.model_class("dlinear"), "revision", 2, raising=False)
    second = run.main(tiny_args + DLINEAR + ["--train_epochs", "1"])[0]["metrics"]
    assert second["config"]["model"]["revision"] == 2 and second["config_id"] != first["config_id"]
    with pytest.raises(ConfigError, match="holds dlinear revision 1, this code is revision 2"):
        run.main(tiny_args + ["--is_training", "0", "--test_dir", first["setting"]])
    assert models.model_class("timemixer").revision == 2  # without calendar features since revision 2


def _history_epochs(results_dir, setting):
    with open(results_dir / setting / "history.csv") as f:
        return [int(r["epoch"]) for r in csv.DictReader(f)]


def _tensorboard_steps(results_dir, setting):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(results_dir / setting / "tensorboard"))
    events.Reload()
    return [e.step for e in events.Scalars("vali_loss")]


def test_a_run_differing_only_in_dropout_keeps_its_own_history_and_tensorboard(tiny_args, tmp_path):
    a = run.main(tiny_args + ["--dropout", "0.1"])[0]["metrics"]["setting"]
    b = run.main(tiny_args + ["--dropout", "0.2"])[0]["metrics"]["setting"]
    assert a != b
    for setting in (a, b):
        assert _history_epochs(tmp_path / "results", setting) == [1, 2]
        assert _tensorboard_steps(tmp_path / "results", setting) == [1, 2]


def test_a_finished_run_is_refused_retested_or_retrained_only_when_asked(tiny_args, tmp_path):
    flags = tiny_args + DLINEAR
    first = run.main(flags)[0]
    with pytest.raises(ConfigError, match="this run has already finished.*--resume auto tests it again"):
        run.main(flags)
    retested = run.main(flags + ["--resume", "auto"])[0]
    assert retested["metrics"]["mse"] == first["metrics"]["mse"] and retested["history"] == first["history"]
    retrained = run.main(flags + ["--overwrite"])[0]
    assert retrained["metrics"]["mse"] == first["metrics"]["mse"], "same seed, same run"
    setting = first["metrics"]["setting"]
    assert _history_epochs(tmp_path / "results", setting) == [1, 2]
    assert _tensorboard_steps(tmp_path / "results", setting) == [1, 2]
    with open(tmp_path / "results" / "results.csv") as f:
        assert len(list(csv.DictReader(f))) == 1, "one row per run and test, replaced when tested again"


def test_a_tested_run_is_never_cleared_by_the_same_configuration_under_other_checkpoints(tiny_args, tmp_path):
    """The same command with another --checkpoints folder (a sweep pointed elsewhere) found no checkpoint, started
    clean and removed the finished run's results. It is refused in one line, and the results stay."""
    flags = tiny_args + DLINEAR
    first = run.main(flags)[0]["metrics"]
    metrics = tmp_path / "results" / first["setting"] / "tp16" / "metrics.json"
    history = (tmp_path / "results" / first["setting"] / "history.csv").read_text()
    elsewhere = [*flags, "--checkpoints", str(tmp_path / "other")]
    for extra in ([], ["--resume", "auto"]):
        with pytest.raises(ConfigError, match="holds the tested results of this configuration, but .*other.* does "
                                              "not hold its checkpoints: pass the --checkpoints it was trained with"):
            run.main(elsewhere + extra)
    assert json.load(open(metrics))["mse"] == first["mse"]
    assert (tmp_path / "results" / first["setting"] / "history.csv").read_text() == history
    retrained = run.main(elsewhere + ["--overwrite"])[0]["metrics"]
    assert retrained["mse"] == first["mse"], "same seed, same run"


class _InterruptAt:
    """Exp callback: Ctrl-C at the given (epoch, step) of the n-th repetition that reaches it."""

    def __init__(self, epoch, step, nth=1):
        self.at, self.left = (epoch, step), nth

    def on_train_step(self, epoch, step, loss):
        if (epoch, step) == self.at:
            self.left -= 1
            if not self.left:
                raise interrupt.Interrupted(signal.SIGINT)
        return loss


def test_an_interrupted_run_is_refused_until_resumed_and_then_equals_an_uninterrupted_one(tiny_args, tmp_path):
    """Dropout on, interrupted in epoch 3: the resumed run repeats epoch 3 from the saved random streams."""
    flags = tiny_args + ["--train_epochs", "4", "--lradj", "type1"]
    whole = run.main(flags + ["--checkpoints", str(tmp_path / "w"), "--results_dir", str(tmp_path / "wr")])[0]
    with pytest.raises(interrupt.Interrupted):
        run.main(flags, callbacks=[_InterruptAt(3, 2)])
    assert "during epoch 3; continue with --resume auto" in interrupt.message()
    with pytest.raises(ConfigError, match=r"an unfinished run .*\(2 of 4 epochs done\): --resume auto continues"):
        run.main(flags)
    resumed = run.main(flags + ["--resume", "auto"])[0]
    assert [h["vali_loss"] for h in resumed["history"]] == [h["vali_loss"] for h in whole["history"]]
    assert resumed["metrics"]["mse"] == whole["metrics"]["mse"]
    setting = resumed["metrics"]["setting"]
    assert _tensorboard_steps(tmp_path / "results", setting) == [1, 2, 3, 4], "no epoch twice"


def test_restarting_repetitions_writes_no_duplicate_result_rows(tiny_args, tmp_path):
    flags = tiny_args + DLINEAR + ["--itr", "2"]
    with pytest.raises(interrupt.Interrupted):
        run.main(flags, callbacks=[_InterruptAt(2, 1, nth=2)])  # the second repetition, in its second epoch
    results = run.main(flags + ["--resume", "auto"])
    assert [r["metrics"]["seed"] for r in results] == [2021, 2022]
    with open(tmp_path / "results" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["seed"], r["test"]) for r in rows) == [("2021", "tp16"), ("2022", "tp16")]
    assert len(metrics_of(tmp_path / "results")) == 2
    assert all(json.load(open(p))["status"] == "trained" for p in (tmp_path / "ckpt").glob("*/run.json"))


def test_resuming_with_another_number_of_processes_warns_that_random_streams_start_anew(tiny_args, tmp_path,
                                                                                        capsys):
    """The last.pth of a 2-rank run continued by one process: rank 1's stream has no one to continue it."""
    run.main(tiny_args + ["--train_epochs", "1"])
    (last,) = (tmp_path / "ckpt").glob("*/last.pth")
    state = checkpoint.load(str(last))
    state["rng"], state["world_size"] = state["rng"] * 2, 2
    torch.save(state, tmp_path / "two_ranks.pth")
    resumed = run.main(tiny_args + ["--resume", str(tmp_path / "two_ranks.pth")])[0]
    assert [h["epoch"] for h in resumed["history"]] == [1, 2]
    assert "resuming a run of 2 ranks with 1: the random streams of the ranks continue only where both have " \
           "them" in capsys.readouterr().err
