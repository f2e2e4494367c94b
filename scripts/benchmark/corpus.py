"""A corpus larger than memory: what a rank's memory and the loader's speed are.

    python -m scripts.benchmark.corpus --dir /data/bigcorpus [--points 1e9] [--series 2000] [--steps 200]
                                       [--nproc 2] [--only build,loader,pagecache,train]

build      generates --points time points in --series .npy files under DIR/src (once) and builds the store
           (once); prints the seconds and the sizes on disk.
loader     windows/s of the training loader (batch 256, windows of 672 + 96) on a corpus that fits in memory
           (8 channels x 1M rows written as one series file each): the memmap store, the same store read into
           memory, and the in-memory WindowDataset over the same (time, channel) tensor; the memmap's page
           cache warm (read once before) and cold (evicted with posix_fadvise before each run).
pagecache  one process reads 2 GB worth of random training windows of the big store: its peak RSS and file-page
           RSS with the reader handing mapped pages back every 256 MB (the default) and never.
train      torchrun --nproc NPROC run.py --ddp --data corpus on the big store: a 4-layer Timer-XL (d_model 256),
           --steps optimizer steps at batch 32 per rank, validation (twice and at the end) and test on 4096 windows; prints every rank's
           peak RSS (the run logs it) and the steps/s.
Numbers only; nothing is asserted. Results and commands go in docs/performance.md.
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, HERE)

from data_provider import corpus, corpus_gen  # noqa: E402
from data_provider.windows import WindowDataset, autoregressive_offsets, train_loader  # noqa: E402
from scripts.benchmark.launch import peak_rss, torchrun, train_seconds  # noqa: E402
from utils import cli  # noqa: E402
from utils.errors import ConfigError  # noqa: E402
from utils.memory import peak_rss_mb, resident_mb  # noqa: E402

SEQ, TOKEN = 672, 96
PARTS = ("build", "loader", "pagecache", "train")


def du_gb(path: str) -> float:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files) / 1e9


def build(args) -> str:
    src, store = os.path.join(args.dir, "src"), os.path.join(args.dir, "src", corpus.STORE_DIR)
    if not os.path.isdir(src):
        start = time.perf_counter()
        corpus_gen.generate(src + ".tmp", int(args.points), args.series, seed=0, missing=0.05)
        os.rename(src + ".tmp", src)
        print(f"generate: {args.points:.3g} points in {args.series} files, {time.perf_counter() - start:.0f} s")
    if not os.path.isdir(store):
        start = time.perf_counter()
        corpus.build(src, store)
        print(f"build: {time.perf_counter() - start:.0f} s, peak RSS of this process so far {peak_rss_mb():.0f} MB")
    manifest = corpus.Corpus(store).manifest
    print(f"store: {manifest['n_series']} series, {manifest['n_points']:,} points, {du_gb(store):.2f} GB "
          f"(sources {du_gb(src) - du_gb(store):.2f} GB)")
    return store


def evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def windows_per_second(ds, batches: int = 200, batch: int = 256) -> float:
    loader = train_loader(ds, batch, 0, 1, seed=0)
    start, seen = time.perf_counter(), 0
    for i, b in enumerate(loader):
        seen += len(b.x)
        if i + 1 == batches:
            break
    return seen / (time.perf_counter() - start)


def loader(args) -> None:
    torch.set_num_threads(1)
    folder = tempfile.mkdtemp(dir=args.dir)
    rows = np.random.default_rng(0).standard_normal((1_000_000, 8)).cumsum(0).astype(np.float32)
    for c in range(rows.shape[1]):
        np.save(os.path.join(folder, f"ch{c}.npy"), rows[:, c])
    store = corpus.build(folder, os.path.join(folder, corpus.STORE_DIR), (1.0 - 1e-4, 5e-5, 5e-5))
    offsets = autoregressive_offsets(SEQ, TOKEN, TOKEN)
    cpu = torch.device("cpu")
    runs = {
        "memmap, page cache warm": lambda: corpus.CorpusWindows(corpus.Corpus(store), "train", SEQ, offsets,
                                                                "series", cpu),
        "memmap, page cache cold": lambda: (evict(os.path.join(store, "values.f32")), corpus.CorpusWindows(
            corpus.Corpus(store), "train", SEQ, offsets, "series", cpu))[1],
        "store read into memory": lambda: corpus.CorpusWindows(corpus.Corpus(store, in_memory=True), "train", SEQ,
                                                               offsets, "series", cpu),
        "WindowDataset (in memory)": lambda: WindowDataset(torch.from_numpy(rows), None, 0, len(rows), SEQ,
                                                           offsets, univariate=True)}
    corpus.CorpusWindows(corpus.Corpus(store), "train", SEQ, offsets, "series", cpu).corpus.values.sum()  # warm
    results = {name: [] for name in runs}
    for _ in range(args.repeat):  # in alternation, so drift in the machine's speed hits every loader alike
        for name, make in runs.items():
            results[name].append(windows_per_second(make()))
    base = np.median(results["WindowDataset (in memory)"])
    for name, rates in results.items():
        print(f"loader {name:28s} {np.median(rates):9.0f} windows/s (median of {args.repeat}; "
              f"{np.median(rates) / base:.2f} x WindowDataset)")


PAGECACHE = """
import sys, numpy as np, torch
sys.path.insert(0, {here!r})
from data_provider import corpus
from data_provider.windows import autoregressive_offsets, train_loader
from utils.memory import peak_rss_mb, resident_mb
corpus.RELEASE_BYTES = {release}
ds = corpus.CorpusWindows(corpus.Corpus({store!r}), "train", {seq}, autoregressive_offsets({seq}, {token}, {token}),
                          "series", torch.device("cpu"))
read, largest_file = 0, 0.0
for batch in train_loader(ds, 256, 0, 1, seed=0):
    read += batch.x.numel() * 4
    largest_file = max(largest_file, resident_mb()["file"])
    if read > 2e9:
        break
print(f"{{peak_rss_mb():.0f}} {{largest_file:.0f}}")
"""


def pagecache(args, store: str) -> None:
    for label, release in (("pages handed back every 256 MB", corpus.RELEASE_BYTES), ("never handed back", 1 << 62)):
        evict(os.path.join(store, "values.f32"))
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", PAGECACHE.format(here=HERE, store=store, release=release,
                                                                     seq=SEQ, token=TOKEN)],
                             capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        peak, file_pages = out.stdout.split()
        print(f"pagecache {label:32s} 2 GB of windows read in {time.perf_counter() - start:.0f} s: peak RSS {peak} MB, "
              f"file pages at most {file_pages} MB")


def train(args, store: str) -> None:
    folder = tempfile.mkdtemp(dir=args.dir)
    flags = ["--data", "corpus", "--root_path", os.path.dirname(store), "--model", "timer_xl",
             "--seq_len", str(SEQ), "--input_token_len", str(TOKEN), "--output_token_len", str(TOKEN),
             "--d_model", "256", "--d_ff", "512", "--e_layers", "4", "--n_heads", "8", "--batch_size", "32",
             "--train_steps", str(args.steps), "--val_every", str(args.steps // 2), "--val_windows", "4096",
             "--val_windows_end", "4096", "--test_windows", "4096", "--lradj", "warmup_cosine", "--learning_rate",
             "1e-4", "--checkpoints", os.path.join(folder, "ckpt"), "--results_dir", os.path.join(folder, "results")]
    log, wall = torchrun(args.nproc, flags)
    print(f"train {args.nproc} ranks x batch 32, {args.steps} steps: peak RSS per rank {peak_rss(log)} MB; "
          f"{args.steps / train_seconds(log):.2f} steps/s in training ({wall:.0f} s wall with start-up, evaluation "
          "and test)")
    print(f"  torchrun --nproc_per_node={args.nproc} run.py --ddp " + " ".join(flags))


def main(argv=None) -> None:
    parser = cli.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", required=True, help="a folder outside the repository with room for 2 x 4 GB")
    parser.add_argument("--points", type=cli.at_least(1.0, float), default=1.02e9,
                        help="generated; NaN stretches take ~1%% out")
    parser.add_argument("--series", type=cli.at_least(1), default=2000)
    parser.add_argument("--steps", type=cli.at_least(1), default=200)
    parser.add_argument("--nproc", type=cli.at_least(1), default=2)
    parser.add_argument("--repeat", type=cli.at_least(1), default=5)
    parser.add_argument("--only", default=",".join(PARTS), help="comma list of the parts to run")
    args = parser.parse_args(argv)
    parts = args.only.split(",")
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ConfigError(f"--only {unknown[0]}: the parts are {', '.join(PARTS)}")
    os.makedirs(args.dir, exist_ok=True)
    store = build(args) if {"build", "pagecache", "train"} & set(parts) else None
    if "loader" in parts:
        loader(args)
    if "pagecache" in parts:
        pagecache(args, store)
    if "train" in parts:
        train(args, store)
    print(f"(this process: peak RSS {peak_rss_mb():.0f} MB, now {resident_mb()})")


if __name__ == "__main__":
    cli.run(main)
