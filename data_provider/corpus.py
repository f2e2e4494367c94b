"""A corpus of many series, larger than memory: built once into one float32 file, then windowed through a
memory map, so a rank holds only the windows of its current batches.

    python -m data_provider.corpus build SOURCE [STORE]   # explicit build (run.py builds a missing one itself)
    python -m data_provider.corpus generate OUT --points 1e9 --series 2000   # a test corpus (data_provider.corpus_gen)

SOURCE holds one numeric file per series (.csv, .npy, .parquet; folders of them, in sorted order). Every
channel of a file is its own univariate series (the Timer papers' channel-independent pre-training); a
leading non-numeric CSV column is taken for dates and dropped. NaN stretches cut a series into the finite
runs around them (no window spans a gap); an infinite value is an error. Each series splits by time into
train/val/test (ratio_split: the first fraction trains, the last is tested), and the mean and std of its
training part are kept for per-series scaling.

The store is a folder: values.f32 (every series, one after another), index.npz (per series: offset, length,
split ends, mean, std, source file and channel) and manifest.json (each source file with the fingerprint of its
whole content, the split, and a fingerprint of the stored values). It is written under a temporary name and renamed into place, so a reader
sees a whole store or none, and a store whose source files changed since is refused, not silently reused.
"""
import argparse
import hashlib
import json
import logging
import mmap
import os
import shutil

import numpy as np
import pandas as pd
import torch

from data_provider.datasets import ratio_split
from data_provider.scaling import StandardScale
from data_provider.windows import Batch, to_device
from utils import cli
from utils.errors import ConfigError
from utils.fingerprints import file_fingerprint

log = logging.getLogger(__name__)

NAME = "corpus"  # the --data value
FORMAT = 2  # 2: source files recorded by content (1: by size and modification time)
SUFFIXES = (".csv", ".npy", ".parquet")
DEFAULT_SPLIT = (0.8, 0.1, 0.1)
STORE_DIR = ".tsf_corpus"  # the default store, inside the source folder (skipped when the sources are listed)
# mapped pages a reader lets accumulate before handing them back: resident file pages count in a process's
# RSS, so without this a long run over a large corpus would show the whole file as its memory
RELEASE_BYTES = 256 << 20
# a page fault maps up to this much around it when it is in the page cache (Linux's fault_around_bytes default):
# a window of 3 KB can map 64 KB, which is what a read is counted as
FAULT_AROUND_BYTES = 64 << 10


# ---- sources --------------------------------------------------------------------------------------------
def source_files(source: str) -> list:
    """Relative paths of the series files under source, sorted; hidden folders (the store) are skipped."""
    found = []
    for folder, dirs, files in os.walk(source):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        found += [os.path.relpath(os.path.join(folder, f), source) for f in sorted(files)
                  if f.lower().endswith(SUFFIXES) and not f.startswith(".")]
    return found


def _stamp(source: str, files: list) -> dict:
    """Each source file's content fingerprint (hashed once, then cached while the file is unchanged)."""
    return {f: file_fingerprint(os.path.join(source, f)) for f in files}


def read_series_file(path: str) -> np.ndarray:
    """(time, channels) float64 of one source file."""
    suffix = os.path.splitext(path)[1].lower()
    try:
        if suffix == ".npy":
            values = np.load(path, allow_pickle=False)
        else:
            frame = pd.read_parquet(path) if suffix == ".parquet" else pd.read_csv(path)
            if frame.shape[1] and not pd.api.types.is_numeric_dtype(frame.iloc[:, 0]):
                frame = frame.iloc[:, 1:]  # a date column
            text = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
            if text:
                raise ConfigError(f"{path}: non-numeric column(s) {text}; a series file holds numbers (and at most a "
                                  "date column first)")
            values = frame.to_numpy(dtype=np.float64)
    except ImportError as e:  # parquet without pyarrow
        raise ConfigError(f"{path}: {e}") from None
    except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ConfigError(f"{path}: cannot read ({e})") from None
    if not np.issubdtype(values.dtype, np.number):
        raise ConfigError(f"{path}: dtype {values.dtype} is not numeric")
    values = values.reshape(len(values), -1) if values.ndim == 1 else values
    if values.ndim != 2:
        raise ConfigError(f"{path}: expected (time,) or (time, channels), got shape {values.shape}")
    if np.isinf(values).any():
        row, col = np.argwhere(np.isinf(values))[0]
        raise ConfigError(f"{path}: infinite value at row {row}, channel {col}; NaN marks a missing value, inf is "
                          "not one")
    return values.astype(np.float64, copy=False)


def finite_runs(column: np.ndarray) -> list:
    """(begin, end) of every stretch of finite values."""
    finite = np.concatenate([[False], np.isfinite(column), [False]])
    edges = np.flatnonzero(finite[1:] != finite[:-1])
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


# ---- build ----------------------------------------------------------------------------------------------
def build(source: str, store: str, split: tuple = DEFAULT_SPLIT) -> str:
    """Write the store for source (see the module docstring); returns store. Series too short to have two
    training points are left out (and counted in the log)."""
    files = source_files(source)
    if not files:
        raise ConfigError(f"{source}: no series files ({', '.join(SUFFIXES)}) in it or its folders")
    train, val, test = split
    if min(split) < 0 or train <= 0 or abs(train + val + test - 1) > 1e-9:
        raise ConfigError(f"corpus split {split}: fractions >= 0 summing to 1, with a training part")
    cut = ratio_split(train, test)
    tmp = f"{store.rstrip(os.sep)}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        os.makedirs(tmp)
    except OSError as e:
        raise ConfigError(f"cannot write the corpus store {store} ({e.strerror}): name a writable place with "
                          "--corpus_store") from None
    rows, digest, offset, dropped = [], hashlib.sha256(), 0, 0
    try:
        with open(os.path.join(tmp, "values.f32"), "wb") as out:
            for file_no, name in enumerate(files):
                values = read_series_file(os.path.join(source, name))
                for channel in range(values.shape[1]):
                    for begin, end in finite_runs(values[:, channel]):
                        series = values[begin:end, channel].astype(np.float32)  # as stored, as scaled
                        ends = cut(len(series))
                        train_end, val_end = ends["train"][1], ends["val"][1]
                        if train_end < 2:
                            dropped += len(series)
                            continue
                        scale = StandardScale.fit(series[:train_end, None])
                        data = series.tobytes()
                        out.write(data)
                        digest.update(data)
                        rows.append((offset, len(series), train_end, val_end, scale.mean[0], scale.std[0], file_no,
                                     channel, begin))
                        offset += len(series)
            out.flush()
            os.fsync(out.fileno())
        if not rows:
            raise ConfigError(f"{source}: no series with at least two training points")
        columns = list(zip(*rows, strict=True))
        index = {name: np.asarray(col, dtype=dtype) for name, col, dtype in zip(
            ("offset", "length", "train_end", "val_end", "mean", "std", "source", "channel", "row"), columns,
            (np.int64, np.int64, np.int64, np.int64, np.float64, np.float64, np.int32, np.int32, np.int64),
            strict=True)}
        np.savez(os.path.join(tmp, "index.npz"), **index)
        digest.update(json.dumps([list(split), *[(r[0], r[1], r[2], r[3]) for r in rows]]).encode())
        manifest = {"format": FORMAT, "source": os.path.abspath(source), "split": list(split),
                    "files": _stamp(source, files), "n_series": len(rows), "n_points": offset,
                    "fingerprint": digest.hexdigest()[:16]}
        with open(os.path.join(tmp, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
        try:
            os.rename(tmp, store)  # atomic: readers see the whole store or none
        except OSError:
            if not os.path.isfile(os.path.join(store, "manifest.json")):
                raise
            log.info("%s was built meanwhile by another process; keeping it", store)
    except OSError as e:  # a full disk, a quota: the reads raise ConfigError
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConfigError(f"cannot write the corpus store {store}: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    log.info("corpus %s: %d series, %d points (%.2f GB) from %d files%s", store, len(rows), offset, offset * 4e-9,
             len(files), f"; {dropped} points in series too short to train on left out" if dropped else "")
    return store


def store_path(root: str, store: str | None) -> str:
    """The store of --root_path: root itself if it is one, else --corpus_store, else root/.tsf_corpus."""
    if os.path.isfile(os.path.join(root, "manifest.json")):
        return root
    return store or os.path.join(root, STORE_DIR)


def stale(store: str, source: str) -> str | None:
    """Why the store does not match the files now in source (None: it does, or source is the store itself)."""
    if os.path.abspath(source) == os.path.abspath(store):
        return None
    now, then = set(source_files(source)), _manifest(store)["files"]
    for what, names in (("new", now - then.keys()), ("missing", then.keys() - now),
                        ("changed", [f for f in now & then.keys()
                                     if file_fingerprint(os.path.join(source, f)) != then[f]])):
        if names:
            return f"{len(names)} file(s) {what} since it was built, e.g. {sorted(names)[0]}"
    return None


def _manifest(store: str) -> dict:
    with open(os.path.join(store, "manifest.json")) as f:
        manifest = json.load(f)
    if manifest.get("format") != FORMAT:
        raise ConfigError(f"{store}: corpus store format {manifest.get('format')}, this version reads {FORMAT}; "
                          "delete it to rebuild")
    return manifest


# ---- read -----------------------------------------------------------------------------------------------
class Corpus:
    """An opened store: the index in memory (a few numbers per series), the values memory-mapped."""

    def __init__(self, store: str, in_memory: bool = False):
        self.store, self.manifest = store, _manifest(store)
        with np.load(os.path.join(store, "index.npz")) as index:
            self.index = {k: index[k] for k in index.files}
        path = os.path.join(store, "values.f32")
        if in_memory:  # the same reads from an array in memory: the memmap's yardstick
            self._map, self.values = None, np.fromfile(path, dtype=np.float32)
        else:
            with open(path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            self.values = np.frombuffer(self._map, dtype=np.float32)
        self._mapped = 0  # bytes this process may have mapped since it last handed pages back

    @property
    def fingerprint(self) -> str:
        return self.manifest["fingerprint"]

    def read(self, starts: np.ndarray, length: int) -> np.ndarray:
        """(len(starts), length) float32 copies of the values at starts (offsets into the store)."""
        rows = self.values[starts[:, None] + np.arange(length)]
        self._mapped += len(starts) * (length * 4 + FAULT_AROUND_BYTES)
        if self._map is not None and self._mapped > RELEASE_BYTES:
            # the pages stay in the page cache; this process only stops mapping them
            self._map.madvise(mmap.MADV_DONTNEED)
            self._mapped = 0
        return rows

    def bounds(self, split: str, seq_len: int) -> tuple:
        """(begin, end) rows of every series that a split's windows read: val and test look back seq_len
        rows into the part before them, as the benchmarks' splits do."""
        length, train_end, val_end = self.index["length"], self.index["train_end"], self.index["val_end"]
        if split == "train":
            return np.zeros_like(length), train_end
        if split == "val":
            return np.maximum(train_end - seq_len, 0), val_end
        return np.maximum(val_end - seq_len, 0), length


class CorpusWindows:
    """Every window of one split across all series of a corpus, univariate, numbered series by series.

    Window i is found by a binary search over the cumulative window counts, so nothing per window is stored;
    a batch is one fancy-indexed read of the memory map. norm: "series" scales by the series' training mean
    and std; "window" by the mean and std of the window's own input part (applied to its target too).
    """
    lazy_order = True  # too many windows for a randperm of them: orders are computed per block
    epoch_windows = None  # every window in every epoch
    n_channels_out = 1

    def __init__(self, corpus: Corpus, split: str, seq_len: int, y_offsets: torch.Tensor, norm: str,
                 device: torch.device, subset: torch.Tensor | None = None):
        self.corpus, self.seq_len, self.norm, self.device = corpus, seq_len, norm, device
        self.window_len = max(seq_len, int(y_offsets.max()) + 1)
        begin, end = corpus.bounds(split, seq_len)
        self.counts = np.maximum(end - begin - self.window_len + 1, 0)
        self.first = corpus.index["offset"] + begin  # store offset of each series' first window
        self.cumulative = np.cumsum(self.counts)
        steps = y_offsets[1:] - y_offsets[:-1]
        self.y_index = slice(int(y_offsets[0]), int(y_offsets[-1]) + 1) if bool((steps == 1).all()) \
            else y_offsets.to(device)
        self.subset = subset

    def window_scale(self, idx: torch.Tensor) -> None:
        """The scaled metrics take each window's scale from its input."""
        return None

    @property
    def n_windows(self) -> int:
        return int(self.cumulative[-1]) if len(self.cumulative) else 0

    def __len__(self) -> int:
        return self.n_windows if self.subset is None else len(self.subset)

    def locate(self, idx: np.ndarray) -> tuple:
        """(series, store offset of the window's first point) of windows idx."""
        series = np.searchsorted(self.cumulative, idx, side="right")
        return series, self.first[series] + idx - (self.cumulative[series] - self.counts[series])

    def series_name(self, window: int, columns: list) -> str:
        """The source file and channel of a window (columns: unused, every corpus series is one channel)."""
        idx = int(window if self.subset is None else self.subset[window])
        series = int(self.locate(np.array([idx]))[0][0])
        index = self.corpus.index
        return f"{self.corpus.manifest['files'][index['source'][series]][0]} channel {index['channel'][series]}"

    def gather(self, idx: torch.Tensor) -> Batch:
        """Windows idx as one batch; position: the row of each window's first point in its source file."""
        if self.subset is not None:
            idx = self.subset[idx.cpu()]
        series, start = self.locate(idx.cpu().numpy())
        window = torch.from_numpy(self.corpus.read(start, self.window_len))
        index = self.corpus.index
        if self.norm == "series":
            mean, std = (torch.from_numpy(index[k][series]).float()[:, None] for k in ("mean", "std"))
        else:  # the inputs' own statistics, as the models' instance normalisation computes them
            inputs = window[:, :self.seq_len].double()
            mean = inputs.mean(1, keepdim=True)
            std = torch.sqrt(inputs.var(1, unbiased=False, keepdim=True) + 1e-5)
            mean, std = mean.float(), std.float()
        window = to_device(((window - mean) / std).unsqueeze(-1), self.device)
        position = torch.from_numpy(start - index["offset"][series] + index["row"][series])
        return Batch(window[:, :self.seq_len], window[:, self.y_index], None, to_device(position, self.device))


def main(argv=None) -> None:
    parser = cli.ArgumentParser(prog="python -m data_provider.corpus", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    b = commands.add_parser("build", help="build the store of a folder of series files")
    b.add_argument("source", type=cli.existing_folder)
    b.add_argument("store", nargs="?", default=None, help=f"default: SOURCE/{STORE_DIR}")
    b.add_argument("--split", type=_split, default=DEFAULT_SPLIT, help="train,val,test fractions per series "
                   f"(default: {','.join(map(str, DEFAULT_SPLIT))})")
    g = commands.add_parser("generate", help="write a folder of generated series (data_provider.corpus_gen)")
    from data_provider import corpus_gen
    corpus_gen.add_arguments(g)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "build":
        build(args.source, args.store or os.path.join(args.source, STORE_DIR), args.split)
    else:
        for flag, value in (("--points", args.points), ("--series", args.series), ("--channels", args.channels)):
            if value < 1:
                raise ConfigError(f"{flag} must be >= 1, got {value:g}")
        if not 0 <= args.missing <= 1:
            raise ConfigError(f"--missing is a fraction of the series, in [0, 1]: got {args.missing:g}")
        corpus_gen.run(args)


def _split(text: str) -> tuple:
    """--split: three fractions, train,val,test (build() checks that they make a split)."""
    try:
        split = tuple(float(v) for v in text.split(","))
    except ValueError:
        split = ()
    if len(split) != 3:
        raise argparse.ArgumentTypeError(f"expected three fractions train,val,test, got {text!r}")
    return split


if __name__ == "__main__":
    cli.run(main)
