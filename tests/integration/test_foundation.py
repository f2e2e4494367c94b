"""Published checkpoints through run.py: zero-shot, fine-tuned whole, head-only and with LoRA, under one process,
DDP and FSDP, with the checkpoint's fingerprint in the run's identity and its architecture in the flags."""
import json
import os
import sys

import pytest
import torch

import run
from tests.conftest import forked_ranks
from utils.errors import ConfigError
from utils.fingerprints import tree_fingerprint

pytest.importorskip("chronos")
pytest.importorskip("peft")
from chronos.chronos_bolt import ChronosBoltModelForForecasting  # noqa: E402
from transformers import T5Config  # noqa: E402

from tests.unit.test_foundation_chronos_bolt import PUBLISHED  # noqa: E402


def _published_checkpoint(name: str, folder):
    """A tiny random checkpoint of each model in its publisher's format, as its unit tests make it."""
    if name == "chronos_bolt":
        from tests.unit.test_foundation_chronos_bolt import make_checkpoint
        return make_checkpoint(folder)
    if name == "tirex":
        pytest.importorskip("tirex")
        from tests.unit.test_foundation_tirex import make_checkpoint
        return make_checkpoint(folder)
    if name == "timesfm":
        pytest.importorskip("timesfm")
        from tests.unit.test_foundation_timesfm import make_checkpoint
        return make_checkpoint(folder)[0]
    if name == "chronos2":
        from tests.unit.test_foundation_chronos2 import make_checkpoint
        return make_checkpoint(folder)
    if name == "sundial":
        from tests.unit.test_foundation_sundial import write_checkpoint
        return write_checkpoint(folder)
    if name == "moirai":
        from tests.unit.test_foundation_moirai import write_checkpoint
        return write_checkpoint(folder)
    if name == "ttm":
        from tests.unit.test_foundation_ttm import write_checkpoint
        return write_checkpoint(folder)
    if name == "time_moe":
        from tests.unit.test_foundation_time_moe import random_weights, write
        return write(folder, random_weights())
    from tests.unit.test_foundation_timer import write_checkpoint
    return write_checkpoint(folder)


@pytest.mark.slow  # each published model trained and tested; test_models.py holds each end to end in the fast tier
@pytest.mark.parametrize("name", ["chronos_bolt", "chronos2", "tirex", "timesfm", "timer_hf", "time_moe", "sundial",
                                  "moirai", "ttm"])
def test_every_published_model_is_tested_zero_shot_and_fine_tuned_with_lora_through_run_py(name, tiny_csv, tmp_path):
    path = _published_checkpoint(name, tmp_path / "published")
    args = _args(tiny_csv, tmp_path, path, "--subset_rand_ratio", "0.1")
    args[args.index("chronos_bolt")] = name
    zero = run.main(args + ["--is_training", "0"])[0]["metrics"]
    tuned = run.main(args + ["--finetune", "lora"])[0]["metrics"]
    assert zero["epochs_run"] == 0 and tuned["epochs_run"] == 1
    assert zero["n_test_windows"] == tuned["n_test_windows"] == 105
    assert zero["mse"] != tuned["mse"] and all(torch.isfinite(torch.tensor([zero["mse"], tuned["mse"]])))
    assert zero["config"]["training"]["zero_shot_from_published"] == tuned["config"]["training"]["pretrained"] \
        == tree_fingerprint(str(path))


@pytest.fixture(scope="module")
def chronos_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chronos-bolt-tiny")
    torch.manual_seed(0)
    ChronosBoltModelForForecasting(T5Config(**PUBLISHED)).save_pretrained(folder)
    os.makedirs(folder / ".cache" / "huggingface")  # what huggingface-cli download --local-dir leaves: not weights
    (folder / ".cache" / "huggingface" / "download.lock").write_text("x")
    return folder


def _args(tiny_csv, tmp_path, chronos_dir, *extra):
    return ["--model", "chronos_bolt", "--pretrained", str(chronos_dir), "--nonautoregressive",
            "--data", "custom", "--root_path", str(tiny_csv.parent), "--data_path", tiny_csv.name,
            "--seq_len", "48", "--output_token_len", "16", "--batch_size", "16", "--train_epochs", "1",
            "--device", "cpu", "--checkpoints", str(tmp_path / "ckpt"), "--results_dir", str(tmp_path / "results"),
            *extra]


def test_zero_shot_tests_the_published_weights_under_their_fingerprint(tiny_csv, tmp_path, chronos_dir):
    metrics = run.main(_args(tiny_csv, tmp_path, chronos_dir, "--is_training", "0"))[0]["metrics"]
    assert metrics["epochs_run"] == 0 and metrics["mse"] > 0 and metrics["crps"] > 0
    config = metrics["config"]
    assert config["training"] == {"zero_shot_from_published": tree_fingerprint(str(chronos_dir)), "seed": 2021}
    assert config["model"]["e_layers"] == 2 and config["model"]["horizon"] == 16  # from the checkpoint
    quantiles = run.main(_args(tiny_csv, tmp_path, chronos_dir, "--is_training", "0", "--loss", "quantile"))
    assert quantiles[0]["metrics"]["setting"] != metrics["setting"]  # what the loss reads is part of the test
    assert quantiles[0]["metrics"]["config"]["training"]["loss"] == "quantile"
    # the point forecast is the median either way: the framework's of the quantiles sorted (a random model's cross)
    assert quantiles[0]["metrics"]["mse"] == pytest.approx(metrics["mse"], rel=1e-3)
    assert quantiles[0]["metrics"]["crps"] < metrics["crps"]  # nine quantiles, not a point mass


def test_a_changed_checkpoint_is_another_run(tmp_path, chronos_dir):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in os.listdir(chronos_dir):
        if not name.startswith("."):
            (copy / name).write_bytes((chronos_dir / name).read_bytes())
    assert tree_fingerprint(str(copy)) == tree_fingerprint(str(chronos_dir))  # .cache/ is not the weights
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "dropout_rate": 0.2}))
    assert tree_fingerprint(str(copy)) != tree_fingerprint(str(chronos_dir))


def test_flags_that_do_not_fit_the_checkpoint_are_refused_in_one_line(tiny_csv, tmp_path, chronos_dir):
    cases = [(["--e_layers", "3"], r"--e_layers 3: the checkpoint at .* has e_layers 2; give --e_layers 2"),
             (["--seq_len", "64"], r"--seq_len 64: the checkpoint at .* reads at most 48 points of context"),
             (["--loss", "gaussian"], r"model chronos_bolt: forecasts 9 quantiles"),
             (["--loss", "quantile", "--quantiles", "0.1,0.5,0.9"], r"--quantiles 0.1,0.5,0.9: model chronos_bolt "
                                                                    r"forecasts the quantiles 0.1,0.2"),
             (["--finetune", "lora", "--is_training", "0"], r"--finetune lora trains part of pretrained weights"),
             (["--lora_rank", "4"], r"--lora_rank and --lora_alpha apply with --finetune lora")]
    for extra, message in cases:
        with pytest.raises(ConfigError, match=message):
            run.main(_args(tiny_csv, tmp_path, chronos_dir, *extra))
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(ConfigError, match=r"--pretrained .*other: expected a Chronos-Bolt checkpoint"):
        run.main(_args(tiny_csv, tmp_path, other))
    with pytest.raises(ConfigError, match=r"--pretrained: model dlinear reads no published checkpoint; those that "
                                          r"do: .*chronos_bolt"):
        run.main(_args(tiny_csv, tmp_path, chronos_dir)[:1] + ["dlinear"] + _args(tiny_csv, tmp_path, chronos_dir)[2:])
    with pytest.raises(ConfigError, match=r"--pretrained .*missing: no such file or folder"):
        run.main(_args(tiny_csv, tmp_path, tmp_path / "missing"))


def _trainable_keys(run_metrics) -> set:
    return set(torch.load(run_metrics["checkpoint"], weights_only=True)["model"])


@pytest.mark.parametrize("finetune", ["head", "lora"])
def test_partial_fine_tuning_trains_and_saves_only_its_part_and_tests_it_again(tiny_csv, tmp_path, chronos_dir,
                                                                             finetune):
    # few-shot: a fifth of the training windows
    args = _args(tiny_csv, tmp_path, chronos_dir, "--finetune", finetune, "--learning_rate", "0.01",
                 "--subset_rand_ratio", "0.2")
    first = run.main(args)[0]["metrics"]
    keys = _trainable_keys(first)
    if finetune == "head":
        assert keys and all(k.startswith("chronos.output_patch_embedding.") for k in keys)
    else:
        assert keys and all(".lora_A." in k or ".lora_B." in k for k in keys)
    zero = run.main(_args(tiny_csv, tmp_path, chronos_dir, "--is_training", "0"))[0]["metrics"]
    assert first["mse"] != zero["mse"]  # it learnt something
    again = run.main(args + ["--resume", "auto"])[0]["metrics"]  # a finished run is tested again from its checkpoint
    assert again["mse"] == first["mse"]
    assert first["config"]["training"]["finetune"] == finetune
    assert first["config"]["training"]["pretrained"] == tree_fingerprint(str(chronos_dir))
    assert first["config"]["training"]["subset_rand_ratio"] == 0.2


@pytest.mark.slow
def test_ddp_and_fsdp_fine_tune_like_one_process(tiny_csv, tmp_path, chronos_dir):
    """Dropout off (the flag may change the checkpoint's): two processes of batch 8 train like one of 16, LoRA
    and whole, and FSDP shards the T5 blocks and trains like DDP."""
    base = _args(tiny_csv, tmp_path, chronos_dir, "--dropout", "0", "--train_steps", "3", "--val_every", "3")
    for finetune in ("lora", "full"):
        args = base + ["--finetune", finetune]
        one = run.main(args + ["--des", "one"])[0]["metrics"]
        half = [a if a != "16" or args[i - 1] != "--batch_size" else "8" for i, a in enumerate(args)]
        proc, ranks = forked_ranks(half + ["--des", "ddp"], tmp_path / f"ddp_{finetune}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        for k in ("mse", "mae", "crps"):
            assert ranks[0][0]["metrics"][k] == pytest.approx(one[k], rel=1e-4), (finetune, k)
        proc, sharded = forked_ranks(half + ["--fsdp", "--des", "fsdp"], tmp_path / f"fsdp_{finetune}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        for k in ("mse", "mae"):
            assert sharded[0][0]["metrics"][k] == pytest.approx(ranks[0][0]["metrics"][k], rel=1e-4), (finetune, k)
        if finetune == "full":  # each rank holds about half the parameters and optimizer state
            assert sharded[0][0]["metrics"]["state_mb"] < 0.6 * ranks[0][0]["metrics"]["state_mb"]


def test_a_missing_package_is_one_line_naming_the_command(tiny_csv, tmp_path, chronos_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "chronos.chronos_bolt", None)  # import fails as if never installed
    with pytest.raises(ConfigError, match=r"^model chronos_bolt: needs the package chronos-forecasting: pip install "
                                          r"-r requirements-foundation.txt$"):
        run.main(_args(tiny_csv, tmp_path, chronos_dir, "--is_training", "0"))
    monkeypatch.setitem(sys.modules, "peft", None)
    monkeypatch.delitem(sys.modules, "chronos.chronos_bolt")
    with pytest.raises(ConfigError, match=r"--finetune lora needs peft: pip install -r requirements-foundation.txt"):
        run.main(_args(tiny_csv, tmp_path, chronos_dir, "--finetune", "lora"))


def test_the_report_sets_zero_shot_runs_beside_the_published_numbers_of_their_checkpoint(tiny_csv, tmp_path,
                                                                                         chronos_dir, capsys):
    from analysis import report
    metrics = run.main(_args(tiny_csv, tmp_path, chronos_dir, "--is_training", "0", "--des", "bolt-tiny"))[0]
    mse = metrics["metrics"]["mse"]
    reference = tmp_path / "published.csv"
    with open(report.DEFAULT_REFERENCE) as f:
        header = f.readline()
    columns = header.strip().split(",")
    row = {**dict.fromkeys(columns, ""), "paper": "A paper", "table": "Table 9", "model": "chronos_bolt",
           "dataset": "tiny", "seq_len": "48", "horizon": "16", "mse": f"{mse / 1.1:.6f}", "mae": "0.9",
           "source": "https://example.org", "protocol": "zero_shot", "checkpoint": "bolt-tiny"}
    reference.write_text(header + ",".join(row[c] for c in columns) + "\n")
    report.main([str(tmp_path / "results"), "--reference", str(reference)])
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if row.startswith("| tiny | 16 | chronos_bolt | bolt-tiny |"))
    assert "**+10.0%** ✗" in line and "A paper, Table 9" in line
    assert "no paper setting" not in out  # a zero-shot run is not a paper-setting training run


@pytest.mark.slow  # a fine-tuning and four tests
def test_a_run_fine_tuned_with_lora_is_tested_at_another_horizon_on_its_published_weights(tiny_csv, tmp_path,
                                                                                          chronos_dir):
    """--test_dir with --pretrained: the run's adapters on the weights it was fine-tuned from, at any horizon; the
    same horizon scores what the run's own test did; other weights, or none, are refused in one line."""
    trained = run.main(_args(tiny_csv, tmp_path, chronos_dir, "--finetune", "lora", "--subset_rand_ratio", "0.1"))
    setting = trained[0]["metrics"]["setting"]
    test = ["--is_training", "0", "--test_dir", setting]
    again = run.main(_args(tiny_csv, tmp_path, chronos_dir, *test))[0]["metrics"]
    assert again["mse"] == trained[0]["metrics"]["mse"]
    longer = run.main(_args(tiny_csv, tmp_path, chronos_dir, *test, "--test_pred_len", "32"))[0]["metrics"]
    assert longer["test"] == "tp32" and longer["setting"] == setting
    with pytest.raises(ConfigError, match="was fine-tuned from a published checkpoint .*: name it with --pretrained"):
        run.main([a for a in _args(tiny_csv, tmp_path, chronos_dir, *test) if a not in ("--pretrained",
                                                                                         str(chronos_dir))])
    other = tmp_path / "other"
    other.mkdir()
    for name in os.listdir(chronos_dir):
        if not name.startswith("."):
            (other / name).write_bytes((chronos_dir / name).read_bytes())
    (other / "README.md").write_text("another download")
    with pytest.raises(ConfigError, match=r"was fine-tuned from the published checkpoint .*; --pretrained .*other "
                                          r"is \d+-"):
        run.main(_args(tiny_csv, tmp_path, other, *test))
