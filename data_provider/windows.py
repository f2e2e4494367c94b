"""The one windowed dataset: batches are gathered from one float32 tensor.

No window is materialised ahead of time and there is no per-sample __getitem__ + collate:
`series.unfold` views every window without copying, and a batch of B windows is one index_select
of that view; x and y are slices of the gathered block.

The view is indexed (start, time, channel): a multivariate window is then one contiguous run of the
series (which must be row-major), so the gather copies B runs of window_len * C floats instead of
reading every channel with a stride (docs/performance.md has the measurement), and the batch arrives
contiguous.
"""
import copy
from itertools import repeat
from typing import NamedTuple

import numpy as np
import torch


# largest block gathered at once: a few small batches share the fixed cost of a gather call, and the block
# stays cache-sized (larger blocks were slower: docs/performance.md)
GATHER_BYTES = 1 << 20


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor (a batch's window indices) onto `device` without waiting for it.

    A plain copy from pageable memory to a GPU synchronises the stream: once per gather, the host would wait for the
    kernels it had queued ahead, and the GPU then for the host to launch the next step (the first GPU check found our
    loop 19-21% behind the model-only limit for DLinear and iTransformer: docs/performance.md). From pinned memory the
    copy is asynchronous, and the caching host allocator keeps the pinned block until the copy has run.
    """
    if tensor.device.type == "cpu" and device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


class Batch(NamedTuple):
    x: torch.Tensor              # (B, seq_len, C), a view
    y: torch.Tensor              # (B, len(y_offsets), C)
    x_mark: torch.Tensor | None  # (B, seq_len + horizon, F): time features of the whole window, for rolling
    position: torch.Tensor       # (B,) int64: the row of each window's first point in the whole series


def autoregressive_offsets(seq_len: int, input_token_len: int, output_token_len: int) -> torch.Tensor:
    """Next-token targets: the output_token_len points after every input token, flattened in token order."""
    n_tokens = seq_len // input_token_len
    token_ends = (torch.arange(1, n_tokens + 1) * input_token_len)[:, None]
    return (token_ends + torch.arange(output_token_len)[None, :]).reshape(-1)


def direct_offsets(seq_len: int, horizon: int) -> torch.Tensor:
    """The horizon points right after the input window."""
    return seq_len + torch.arange(horizon)


def _window_view(rows: torch.Tensor, window_len: int) -> torch.Tensor:
    """(start, time, channel) view of every window of `rows` (time, channel), without a copy."""
    return rows.unfold(0, window_len, 1).transpose(1, 2)


class WindowDataset:
    """Sliding windows over rows [begin, end) of `series`.

    Multivariate: window i starts at row begin + i and holds every channel.
    Univariate (channel-independent): index i = channel * n_starts + start, each channel its own series.
    """
    lazy_order = False  # few enough windows for a randperm of them per epoch
    epoch_windows = None  # every window in every epoch

    def __init__(self, series: torch.Tensor, marks: torch.Tensor | None, begin: int, end: int, seq_len: int,
                 y_offsets: torch.Tensor, univariate: bool = False, subset: torch.Tensor | None = None):
        self.series, self.seq_len, self.univariate = series, seq_len, univariate
        self.window_len = max(seq_len, int(y_offsets.max()) + 1)
        self.begin = begin
        self.n_starts = max(end - begin - self.window_len + 1, 0)
        self.n_channels = series.shape[1]
        self.n_channels_out = 1 if univariate else self.n_channels
        # (start, time, channel) views of every window: a batch is one index_select, nothing is copied ahead
        self.windows = _window_view(series[begin:end], self.window_len) if self.n_starts else None
        self.mark_windows = None if marks is None or not self.n_starts else \
            _window_view(marks[begin:end], self.window_len)
        steps = y_offsets[1:] - y_offsets[:-1]
        if bool((steps == 1).all()):  # direct, test, and autoregressive with output = input token length
            self.y_index = slice(int(y_offsets[0]), int(y_offsets[-1]) + 1)  # y is a view of the window
        else:
            self.y_index = y_offsets.to(series.device)
        self.subset = None if subset is None else subset.to(series.device)

    @property
    def n_windows(self) -> int:
        """All windows of the split, before any subset."""
        return self.n_starts * (self.n_channels if self.univariate else 1)

    def __len__(self) -> int:
        return self.n_windows if self.subset is None else len(self.subset)

    def series_name(self, window: int, columns: list) -> str:
        """The column a univariate window comes from."""
        return columns[window // self.n_starts]

    def window_scale(self, idx: torch.Tensor) -> None:
        """The scaled metrics take each window's scale from its input."""
        return None

    def channels(self, idx: torch.Tensor) -> torch.Tensor:
        """The channel each univariate window (positions in this dataset) comes from."""
        if self.subset is not None:
            idx = self.subset.cpu()[idx.cpu()]
        return idx // self.n_starts

    def gather(self, idx: torch.Tensor) -> Batch:
        """Windows `idx` (positions in this dataset) as one batch: x and y are views of one gathered block."""
        if self.subset is not None:  # on the series' device (random_subset), or on the CPU (sampled)
            idx = self.subset[to_device(idx, self.subset.device)]
        idx = to_device(idx, self.series.device)
        if self.univariate:
            start = idx % self.n_starts
            window = self.windows[start, :, idx // self.n_starts].unsqueeze(-1)  # (B, W, 1)
        else:
            start = idx
            window = self.windows.index_select(0, idx)  # (B, W, C), contiguous
        x_mark = None if self.mark_windows is None else self.mark_windows.index_select(0, start)
        return Batch(window[:, :self.seq_len], window[:, self.y_index], x_mark, start + self.begin)


class SeriesWindows:
    """Windows cut from many univariate series of different lengths, each ending at chosen forecast origins: the
    M4 protocol's (data_provider/m4.py).

    `flat` holds every series after seq_len zeros (its history padded, as N-BEATS pads a short one), series s from
    flat[starts[s]]. Series s has `count[s]` origins, first[s], first[s] + 1, ... (an origin: the index in the
    series of the first forecast point), spread over `slots` windows: window s * slots + r ends at origin
    first[s] + r * count[s] // slots. Every series thus has as many windows as the next, so an order of the windows
    draws series uniformly and an origin uniformly within one, as N-BEATS samples them.

    `scale` (series,): the in-sample scale of MASE; `reference` (series, horizon): the forecast relative metrics
    compare with (M4's Naive2); `epoch_windows`: the windows of one training epoch, a fresh random draw of them
    per epoch (None: all); `marks`: give the calendar features of series without dates, one channel of zeros (as
    factory.time_features does for a file without dates), to a model that reads them.
    """
    lazy_order = True
    n_channels_out = 1

    def __init__(self, flat: torch.Tensor, starts: torch.Tensor, first: torch.Tensor, count: torch.Tensor,
                 slots: int, seq_len: int, horizon: int, names: list, scale: torch.Tensor | None = None,
                 reference: torch.Tensor | None = None, epoch_windows: int | None = None, marks: bool = False):
        self.flat, self.seq_len, self.horizon, self.slots, self.names = flat, seq_len, horizon, slots, names
        self.starts, self.first, self.count = (t.to(flat.device) for t in (starts, first, count))
        self.window_len = seq_len + horizon
        self.scale, self.reference, self.epoch_windows = scale, reference, epoch_windows
        self.subset, self.marks = None, marks
        self._steps = torch.arange(self.window_len, device=flat.device)

    @property
    def n_windows(self) -> int:
        return len(self.starts) * self.slots

    def __len__(self) -> int:
        return self.n_windows if self.subset is None else len(self.subset)

    def channels(self, idx: torch.Tensor) -> torch.Tensor:
        """The series each window comes from (every series is a channel of its own)."""
        if self.subset is not None:
            idx = self.subset.cpu()[idx.cpu()]
        return idx.cpu() // self.slots

    def series_name(self, window: int, columns: list) -> str:
        return self.names[int(self.channels(torch.tensor([window]))[0])]

    def origins(self, idx: torch.Tensor) -> tuple:
        """(series, origin) of windows `idx` (positions in this dataset)."""
        if self.subset is not None:
            idx = self.subset[to_device(idx, self.subset.device)]
        idx = to_device(idx, self.flat.device)
        series, slot = idx // self.slots, idx % self.slots
        return series, self.first[series] + slot * self.count[series] // self.slots

    def gather(self, idx: torch.Tensor) -> Batch:
        series, origin = self.origins(idx)
        # padded coordinates: origin o of series s is flat[starts[s] + seq_len + o], its window begins seq_len before
        window = self.flat[(self.starts[series] + origin)[:, None] + self._steps].unsqueeze(-1)
        marks = torch.zeros_like(window) if self.marks else None
        return Batch(window[:, :self.seq_len], window[:, self.seq_len:], marks, origin - self.seq_len)

    def window_scale(self, idx: torch.Tensor) -> torch.Tensor | None:
        """(windows, 1, 1) float64: MASE's scale of each window's series, None without one."""
        return None if self.scale is None else self.scale[self.origins(idx)[0]].view(-1, 1, 1)

    def window_reference(self, idx: torch.Tensor) -> torch.Tensor | None:
        """(windows, horizon, 1): the reference forecast of each window (one window per series), None without."""
        return None if self.reference is None else self.reference[self.origins(idx)[0]].unsqueeze(-1)


class FeistelPermutation:
    """A seeded bijection of range(n) evaluated position by position, with no table: the order of a corpus
    whose windows are too many to hold a randperm of (8 bytes each).

    A balanced Feistel network on the smallest even number of bits that covers n is a bijection of that
    power-of-two domain whatever its round function; positions it maps past n are mapped again (cycle
    walking) until they land inside, which keeps it a bijection of range(n). The domain is under 4n, so a
    position takes fewer than four passes on average.
    """
    ROUNDS = 6
    _MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9))

    def __init__(self, n: int, seed: int):
        self.n = n
        self.half = max(1, (max(n - 1, 1).bit_length() + 1) // 2)
        self.mask = np.uint64((1 << self.half) - 1)
        self.keys = np.random.default_rng(seed).integers(0, 1 << 62, self.ROUNDS, dtype=np.uint64)

    def _round(self, right: np.ndarray, key: np.uint64) -> np.ndarray:
        x = (right ^ key) * self._MIX[0]  # uint64 arithmetic wraps modulo 2**64
        x ^= x >> np.uint64(29)
        x *= self._MIX[1]
        x ^= x >> np.uint64(32)
        return x & self.mask

    def _encrypt(self, p: np.ndarray) -> np.ndarray:
        half = np.uint64(self.half)
        left, right = p >> half, p & self.mask
        for key in self.keys:
            left, right = right, left ^ self._round(right, key)
        return (left << half) | right

    def __call__(self, positions: torch.Tensor) -> torch.Tensor:
        p = self._encrypt(positions.cpu().numpy().astype(np.uint64))
        outside = np.flatnonzero(p >= self.n)
        while len(outside):
            p[outside] = self._encrypt(p[outside])
            outside = outside[p[outside] >= self.n]
        return torch.from_numpy(p.astype(np.int64))


def seeded_subset(n: int, keep: int, seed: int) -> torch.Tensor | None:
    """keep of n windows, chosen by a seeded permutation, in increasing order (None: keep is 0 or >= n, all)."""
    if keep <= 0 or keep >= n:
        return None
    return FeistelPermutation(n, seed)(torch.arange(keep)).sort().values


def sampled(dataset, keep: int, seed: int):
    """A view of dataset holding `keep` of its windows (seeded_subset), for a quick evaluation."""
    view = copy.copy(dataset)
    chosen = seeded_subset(len(dataset), keep, seed)
    if chosen is not None:
        view.subset = chosen if dataset.subset is None else dataset.subset.cpu()[chosen]
    return view


class ShuffledShard:
    """This rank's share of a fresh permutation of range(n) per epoch, cut to whole global steps: exactly the
    windows one process at the global batch uses, in the same steps.

    The permutation is seeded by seed + epoch (DistributedSampler's recipe, identical on every rank), cut
    to the largest multiple of world_size x step_windows (step_windows: windows of one rank's optimizer
    step), and rank r takes every world_size-th index from r. Global step k then holds positions
    [k * W * S, (k + 1) * W * S) of the permutation, as one process's step k at batch W * S does. No window
    is repeated to pad a shard: padding gave DDP one step more than one process for some n.

    lazy: a FeistelPermutation computed for the windows asked for, instead of a randperm of all n held for
    the epoch (a corpus of a billion windows). per_epoch: an epoch is the first per_epoch windows of its
    permutation (at least a global step's), a random draw without replacement (M4: one window per series, as
    TSLib's epoch).
    """

    def __init__(self, n: int, rank: int, world_size: int, seed: int, step_windows: int = 1, lazy: bool = False,
                 per_epoch: int | None = None):
        self.n, self.rank, self.world_size, self.seed, self.epoch, self.lazy = n, rank, world_size, seed, 0, lazy
        # the first `drawn` of each epoch's permutation, at least one global step's (N-BEATS's batches of 1024
        # windows from M4 Hourly's 414 series)
        drawn = n if per_epoch is None else min(max(per_epoch, world_size * step_windows), n)
        self.used = drawn // (world_size * step_windows) * world_size * step_windows
        self._table = None  # (epoch, randperm) of the epoch, when not lazy

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return self.used // self.world_size

    def take(self, begin: int, end: int) -> torch.Tensor:
        """The windows at positions [begin, end) of this rank's order of the epoch."""
        positions = self.rank + self.world_size * torch.arange(begin, end)
        if self.lazy:
            return FeistelPermutation(self.n, self.seed + self.epoch)(positions)
        if self._table is None or self._table[0] != self.epoch:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            self._table = (self.epoch, torch.randperm(self.n, generator=generator))
        return self._table[1][positions]


class BatchShard:
    """Whole batches of one process's sequence 0..n-1, dealt to the ranks in turn (rank r: batches r, r + W,
    ...), computed for the positions asked for."""

    def __init__(self, n: int, batch_size: int, rank: int, world_size: int):
        self.n, self.batch_size, self.rank, self.world_size = n, batch_size, rank, world_size

    def __len__(self) -> int:
        full, rest = divmod(self.n, self.batch_size)
        mine = len(range(self.rank, full, self.world_size)) * self.batch_size
        return mine + (rest if rest and full % self.world_size == self.rank else 0)

    def take(self, begin: int, end: int) -> torch.Tensor:
        j = torch.arange(begin, end)
        return (self.rank + self.world_size * (j // self.batch_size)) * self.batch_size + j % self.batch_size


class FixedOrder:
    """A given index tensor as an order (a benchmark's first steps)."""

    def __init__(self, indices: torch.Tensor):
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def take(self, begin: int, end: int) -> torch.Tensor:
        return self.indices[begin:end]


class WindowLoader:
    """Iterates batches of a dataset in an order (ShuffledShard, BatchShard, FixedOrder) computed a block at a
    time, so the order of an epoch is never held whole."""

    def __init__(self, dataset, batch_size: int, order):
        self.dataset, self.batch_size = dataset, batch_size
        self.order = FixedOrder(order) if isinstance(order, torch.Tensor) else order

    def set_epoch(self, epoch: int) -> None:
        if isinstance(self.order, ShuffledShard):
            self.order.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self.batch_sizes())

    def batch_sizes(self) -> list:
        full, rest = divmod(len(self.order), self.batch_size)
        return [self.batch_size] * full + ([rest] if rest else [])

    def indices(self) -> torch.Tensor:
        """The windows of this epoch, in order, that make up its batches."""
        return self.order.take(0, len(self.order))

    def __iter__(self):
        return self.batches()

    def batches(self, start: int = 0):
        """The batches of the epoch from batch `start` on (a run resumed in the middle of an epoch)."""
        # Small batches are gathered a few at a time (up to GATHER_BYTES per gather), so the fixed cost of
        # one gather call is shared; a batch is then a slice of the block, and nothing is copied again.
        per_batch = self.batch_size * self.dataset.window_len * self.dataset.n_channels_out * 4
        chunk = self.batch_size * max(1, GATHER_BYTES // per_batch)
        for begin in range(start * self.batch_size, len(self.order), chunk):
            x, y, x_mark, position = self.dataset.gather(self.order.take(begin, min(begin + chunk, len(self.order))))
            # one split per tensor makes every batch's views in C++, not a Python slice per batch and tensor
            marks = repeat(None) if x_mark is None else x_mark.split(self.batch_size)
            yield from map(Batch, x.split(self.batch_size), y.split(self.batch_size), marks,
                           position.split(self.batch_size))


def train_loader(dataset, batch_size: int, rank: int, world_size: int, seed: int,
                 accum_steps: int = 1) -> WindowLoader:
    """A ShuffledShard in every run (world 1 included), so single-process and DDP share one path.

    An incomplete last global step is dropped, as the DLinear/PatchTST code and TSLib before July 2024 (bdec492)
    drop an incomplete last batch: a step on a window or two at full learning rate is mostly noise, and the next epoch's
    order differs.
    """
    return WindowLoader(dataset, batch_size,
                        ShuffledShard(len(dataset), rank, world_size, seed, batch_size * accum_steps,
                                      lazy=dataset.lazy_order, per_epoch=dataset.epoch_windows))


def eval_windows(n: int, batch_size: int, world_size: int, drop_last: bool = False) -> int:
    """Windows an evaluation scores: all, or (drop_last) those filling whole global batches of
    batch_size x world_size, as one process at that batch with drop_last=True."""
    return n // (batch_size * world_size) * batch_size * world_size if drop_last else n


def eval_loader(dataset, batch_size: int, rank: int, world_size: int,
                drop_last: bool = False) -> WindowLoader:
    """Whole batches of one process's sequence, dealt to the ranks in turn (rank r: batches r, r + W, ...).

    Every window is scored once, and each batch is exactly a batch one process evaluates, so even a model
    whose output depends on the rest of its batch (TimesNet's choice of periods) gives the same forecasts.
    """
    n = eval_windows(len(dataset), batch_size, world_size, drop_last)
    return WindowLoader(dataset, batch_size, BatchShard(n, batch_size, rank, world_size))
