"""A corpus of many series on disk: the build, the memory-mapped windows, their order across ranks, and runs."""
import pytest

import run
from data_provider import corpus_gen
from tests.conftest import forked_ranks
from tests.integration.test_corpus import _corpus_args


def test_two_ranks_on_a_corpus_train_like_one_process_at_the_global_batch(tmp_path):
    """Rank 1 waits for rank 0 to build the store; then the lazy order gives both one process's steps."""
    root = tmp_path / "series"
    corpus_gen.generate(str(root), 20000, 8, seed=4)
    args = _corpus_args(root, tmp_path, "--lr_scale", "none", "--dropout", "0")
    proc, ranks = forked_ranks(args + ["--batch_size", "16"], tmp_path / "ddp")
    assert proc.returncode == 0, proc.stderr[-3000:]
    single = run.main(args + ["--des", "single"])[0]
    (ddp,), _ = ranks
    assert ddp["metrics"]["global_batch_size"] == single["metrics"]["global_batch_size"] == 32
    for a, b in zip(ddp["history"], single["history"], strict=True):
        for k in ("train_loss", "vali_loss", "test_loss"):
            assert a[k] == pytest.approx(b[k], rel=1e-5), k
    assert ddp["metrics"]["mse"] == pytest.approx(single["metrics"]["mse"], rel=1e-5)
