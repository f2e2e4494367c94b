"""A corpus of many series on disk: the build, the memory-mapped windows, their order across ranks, and runs."""
import os

import numpy as np
import pytest

import run
from data_provider import corpus, corpus_gen
from utils.errors import ConfigError
from utils.fingerprints import file_fingerprint


def _corpus_args(root, tmp_path, *extra):
    return ["--data", "corpus", "--root_path", str(root), "--model", "timer_xl", "--seq_len", "48",
            "--input_token_len", "16", "--output_token_len", "16", "--d_model", "16", "--d_ff", "32",
            "--n_heads", "2", "--e_layers", "1", "--batch_size", "32", "--train_epochs", "1",
            "--subset_rand_ratio", "0.02", "--val_windows", "300", "--device", "cpu",
            "--checkpoints", str(tmp_path / "ckpt"), "--results_dir", str(tmp_path / "results"), *extra]


def test_run_builds_a_missing_store_and_refuses_one_whose_files_changed(tmp_path):
    root = tmp_path / "series"
    corpus_gen.generate(str(root), 20000, 8, seed=4)
    result = run.main(_corpus_args(root, tmp_path))[0]
    assert os.path.isfile(root / corpus.STORE_DIR / "manifest.json")
    assert result["metrics"]["dataset"] == "series" and result["metrics"]["features"] == "U"
    assert result["metrics"]["config"]["data"]["corpus_norm"] == "series"
    assert result["metrics"]["config"]["training"]["val_windows"] == 300
    changed = corpus.source_files(str(root))[3]
    np.save(root / changed, np.arange(500, dtype=np.float32))
    with pytest.raises(ConfigError, match=rf"does not match the files in .*: 1 file\(s\) changed since it was built, "
                                          rf"e.g. {changed}; delete the store"):
        run.main(_corpus_args(root, tmp_path, "--des", "again"))


def test_a_model_pretrained_on_a_corpus_is_tested_zero_shot(tiny_csv, tmp_path):
    """Zero-shot: the pretrained weights tested without training. On the corpus itself it scores exactly what the
    pre-training run's test scored; on a benchmark file it needs no run of its own."""
    root = tmp_path / "series"
    corpus_gen.generate(str(root), 20000, 8, seed=4)
    pretrained = run.main(_corpus_args(root, tmp_path, "--test_windows", "200"))[0]["metrics"]
    weights = pretrained["checkpoint"]
    again = run.main(_corpus_args(root, tmp_path / "zs", "--test_windows", "200", "--is_training", "0",
                                  "--pretrain_model_path", weights))[0]["metrics"]
    assert again["test"] == "tp16_w200" and again["n_test_windows"] == 200 and again["checkpoint"] == weights
    assert again["config"]["training"] == {"zero_shot_from": file_fingerprint(weights), "seed": 2021}
    for k in ("mse", "mae"):
        assert again[k] == pretrained[k], k
    ett = ["--data", "custom", "--root_path", str(tiny_csv.parent), "--data_path", tiny_csv.name, "--univariate"]
    flags = _corpus_args(root, tmp_path / "ett", "--is_training", "0", "--pretrain_model_path", weights)
    flags[flags.index("--data"):flags.index("--root_path") + 2] = ett
    zero = run.main(flags)[0]["metrics"]
    assert zero["dataset"] == "tiny" and zero["features"] == "U" and zero["epochs_run"] == 0
    with pytest.raises(ConfigError, match="d_model: 16 -> 32"):
        run.main(flags + ["--d_model", "32"])
    with pytest.raises(ConfigError, match="add --adaptation to fine-tune from it, or --is_training 0"):
        run.main(_corpus_args(root, tmp_path, "--pretrain_model_path", weights))
