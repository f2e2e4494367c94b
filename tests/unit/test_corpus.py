"""A corpus of many series on disk: the build, the memory-mapped windows, their order across ranks, and runs."""
import os

import numpy as np
import pandas as pd
import pytest
import torch

from data_provider import corpus, corpus_gen
from data_provider.windows import FeistelPermutation, direct_offsets, seeded_subset, train_loader
from utils.errors import ConfigError


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """30 generated series in .npy, .csv and .parquet, some with NaN stretches and two channels."""
    root = tmp_path_factory.mktemp("corpus")
    for fmt, seed in (("npy", 1), ("csv", 2), ("parquet", 3)):
        corpus_gen.generate(str(root / fmt), 12000, 10, seed=seed, fmt=fmt, missing=0.5, max_channels=2)
    return root


@pytest.fixture(scope="module")
def store(source, tmp_path_factory):
    return corpus.build(str(source), str(tmp_path_factory.mktemp("store") / "store"))


def _series(source):
    """Every finite run of every channel of every file, in the build's order, as float32."""
    runs = []
    for name in corpus.source_files(str(source)):
        values = corpus.read_series_file(os.path.join(source, name))
        for c in range(values.shape[1]):
            runs += [values[b:e, c].astype(np.float32) for b, e in corpus.finite_runs(values[:, c])]
    return runs


def test_feistel_permutation_is_a_seeded_bijection_of_any_range():
    for n in (1, 2, 3, 17, 1000, 4097):
        p = FeistelPermutation(n, seed=5)(torch.arange(n))
        assert sorted(p.tolist()) == list(range(n))
    a, b = (FeistelPermutation(1000, seed)(torch.arange(1000)) for seed in (5, 6))
    assert not torch.equal(a, b) and torch.equal(a, FeistelPermutation(1000, 5)(torch.arange(1000)))
    assert abs(np.corrcoef(np.arange(1000), a.numpy())[0, 1]) < 0.1  # no trace of the identity order left
    assert FeistelPermutation(10**12, 0)(torch.tensor([0, 10**12 - 1])).max() < 10**12


def test_the_store_holds_every_finite_run_with_its_training_statistics(source, store):
    runs = _series(source)
    opened = corpus.Corpus(store)
    index = opened.index
    kept = [r for r in runs if int(len(r) * 0.8) >= 2]
    assert len(kept) == len(index["offset"]) == opened.manifest["n_series"] and len(kept) > 30
    assert any(np.isnan(corpus.read_series_file(os.path.join(source, f))).any() for f in corpus.source_files(str(source)))
    for i, values in enumerate(kept):
        offset, length = index["offset"][i], index["length"][i]
        assert np.array_equal(opened.values[offset:offset + length], values)
        train = values[:index["train_end"][i]].astype(np.float64)
        assert index["mean"][i] == pytest.approx(train.mean(), rel=1e-9)
        assert index["std"][i] == pytest.approx(train.std(), rel=1e-9)
        assert index["train_end"][i] == int(length * 0.8) and index["val_end"][i] == length - int(length * 0.1)
    assert not [p for p in os.listdir(os.path.dirname(store)) if ".tmp" in p], "built under a temporary name"


@pytest.mark.parametrize("norm", ["series", "window"])
def test_a_batch_is_the_windows_cut_from_the_series_and_scaled(source, store, norm):
    opened = corpus.Corpus(store)
    runs = [r for r in _series(source) if int(len(r) * 0.8) >= 2]
    ds = corpus.CorpusWindows(opened, "val", 24, direct_offsets(24, 8), norm, torch.device("cpu"))
    expected = []
    for i, values in enumerate(runs):
        train_end, val_end = opened.index["train_end"][i], opened.index["val_end"][i]
        begin = max(train_end - 24, 0)
        for start in range(begin, val_end - 32 + 1):
            w = values[start:start + 32].astype(np.float64)
            mean, std = (opened.index["mean"][i], opened.index["std"][i]) if norm == "series" else \
                (w[:24].mean(), np.sqrt(w[:24].var() + 1e-5))
            expected.append(((w - mean) / std, start + opened.index["row"][i]))
    assert len(ds) == len(expected)
    pick = torch.tensor([0, len(ds) - 1, *torch.randint(0, len(ds), (200,), generator=torch.Generator().manual_seed(0))])
    batch = ds.gather(pick)
    want = np.stack([expected[i][0] for i in pick.tolist()])
    assert np.allclose(torch.cat([batch.x, batch.y], 1)[..., 0].numpy(), want, rtol=1e-4, atol=1e-4)
    assert batch.position.tolist() == [expected[i][1] for i in pick.tolist()]
    in_memory = corpus.CorpusWindows(corpus.Corpus(store, in_memory=True), "val", 24, direct_offsets(24, 8), norm,
                                     torch.device("cpu")).gather(pick)
    assert torch.equal(in_memory.x, batch.x) and torch.equal(in_memory.y, batch.y)


@pytest.mark.parametrize("world,batch", [(2, 8), (3, 4)])
def test_ranks_take_one_processs_steps_of_the_corpus_at_the_global_batch(store, world, batch):
    """The lazy (Feistel) order deals the windows exactly as the in-memory loaders do."""
    ds = corpus.CorpusWindows(corpus.Corpus(store), "train", 24, direct_offsets(24, 8), "series", torch.device("cpu"))
    ds.subset = seeded_subset(ds.n_windows, 1000, seed=1)  # a few steps are enough
    single = train_loader(ds, world * batch, 0, 1, seed=3)
    ranks = [train_loader(ds, batch, r, world, seed=3) for r in range(world)]
    for loader in (single, *ranks):
        loader.set_epoch(4)
    epoch = single.indices()
    assert len(set(epoch.tolist())) == len(epoch) == 1000 // (world * batch) * world * batch
    for one, *parts in zip(single, *ranks, strict=True):
        assert torch.equal(torch.sort(torch.cat([p.x for p in parts]).flatten()).values,
                           torch.sort(one.x.flatten()).values)


def test_bad_sources_are_one_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no series files"):
        corpus.build(str(tmp_path), str(tmp_path / "s"))
    pd.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"]}).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ConfigError, match=r"bad.csv: non-numeric column\(s\) \['b'\]"):
        corpus.build(str(tmp_path), str(tmp_path / "s"))
    os.remove(tmp_path / "bad.csv")
    np.save(tmp_path / "inf.npy", np.array([1.0, np.inf, 2.0]))
    with pytest.raises(ConfigError, match="inf.npy: infinite value at row 1"):
        corpus.build(str(tmp_path), str(tmp_path / "s"))
    assert not os.path.exists(tmp_path / "s") and not [p for p in os.listdir(tmp_path) if ".tmp" in p]
    os.remove(tmp_path / "inf.npy")
    np.save(tmp_path / "ok.npy", np.arange(100.0))
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="cannot write the corpus store .* --corpus_store"):
        corpus.build(str(tmp_path), str(tmp_path / "file" / "store"))


def test_a_store_is_stale_when_a_source_changes_anywhere_and_only_then(source, tmp_path):
    """An edit inside a file that keeps its size and modification time is found; a file touched but unchanged
    keeps the store."""
    import shutil
    root = tmp_path / "series"
    shutil.copytree(source / "npy", root)
    store = corpus.build(str(root), str(tmp_path / "store"))
    name = corpus.source_files(str(root))[0]
    path = root / name
    os.utime(path)
    assert corpus.stale(store, str(root)) is None
    before = os.stat(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit in the middle of the values
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert os.stat(path).st_size == before.st_size and os.stat(path).st_mtime_ns == before.st_mtime_ns
    assert corpus.stale(store, str(root)) == f"1 file(s) changed since it was built, e.g. {name}"
