"""The one windowed dataset: batches are gathered by index arithmetic from one float32 tensor.

No window is materialised ahead of time and there is no per-sample __getitem__ + collate:
a batch of B windows is `series[starts[:, None] + offsets]`, one vectorised gather.
"""
from typing import NamedTuple

import torch
from torch.utils.data import DistributedSampler

from utils.dist import shard_range


class Batch(NamedTuple):
    x: torch.Tensor              # (B, seq_len, C)
    y: torch.Tensor              # (B, len(y_offsets), C)
    x_mark: torch.Tensor | None  # (B, seq_len + horizon, F): time features of the whole window, for rolling


def autoregressive_offsets(seq_len: int, input_token_len: int, output_token_len: int) -> torch.Tensor:
    """Next-token targets: the output_token_len points after every input token, flattened in token order."""
    n_tokens = seq_len // input_token_len
    token_ends = (torch.arange(1, n_tokens + 1) * input_token_len)[:, None]
    return (token_ends + torch.arange(output_token_len)[None, :]).reshape(-1)


def direct_offsets(seq_len: int, horizon: int) -> torch.Tensor:
    """The horizon points right after the input window."""
    return seq_len + torch.arange(horizon)


class WindowDataset:
    """Sliding windows over rows [begin, end) of `series`.

    Multivariate: window i starts at row begin + i and holds every channel.
    Univariate (channel-independent): index i = channel * n_starts + start, each channel its own series.
    """

    def __init__(self, series: torch.Tensor, marks: torch.Tensor | None, begin: int, end: int, seq_len: int,
                 y_offsets: torch.Tensor, univariate: bool = False, subset: torch.Tensor | None = None):
        self.series, self.marks = series, marks
        self.seq_len, self.univariate = seq_len, univariate
        device = series.device
        self.x_offsets = torch.arange(seq_len, device=device)
        self.y_offsets = y_offsets.to(device)
        self.window_len = max(seq_len, int(y_offsets.max()) + 1)
        self.mark_offsets = torch.arange(self.window_len, device=device)
        self.begin = begin
        self.n_starts = max(end - begin - self.window_len + 1, 0)
        self.n_channels = series.shape[1]
        self.subset = None if subset is None else subset.to(device)

    @property
    def n_windows(self) -> int:
        """All windows of the split, before any subset."""
        return self.n_starts * (self.n_channels if self.univariate else 1)

    def __len__(self) -> int:
        return self.n_windows if self.subset is None else len(self.subset)

    def gather(self, idx: torch.Tensor) -> Batch:
        """Windows `idx` (positions in this dataset) as one batch."""
        idx = idx.to(self.series.device)
        if self.subset is not None:
            idx = self.subset[idx]
        if self.univariate:
            channel, start = idx // self.n_starts, idx % self.n_starts
        else:
            channel, start = None, idx
        start = start + self.begin
        x = self._take(start[:, None] + self.x_offsets, channel)
        y = self._take(start[:, None] + self.y_offsets, channel)
        x_mark = None if self.marks is None else self.marks[start[:, None] + self.mark_offsets]
        return Batch(x, y, x_mark)

    def _take(self, rows: torch.Tensor, channel: torch.Tensor | None) -> torch.Tensor:
        if channel is None:
            return self.series[rows]
        return self.series[rows, channel[:, None]].unsqueeze(-1)


class WindowLoader:
    """Iterates batches of a WindowDataset in the order given by a sampler or an index range."""

    def __init__(self, dataset: WindowDataset, batch_size: int, order):
        self.dataset, self.batch_size, self.order = dataset, batch_size, order

    def set_epoch(self, epoch: int) -> None:
        if isinstance(self.order, DistributedSampler):
            self.order.set_epoch(epoch)

    def __len__(self) -> int:
        return -(-len(self.order) // self.batch_size)

    def group_sizes(self, group: int) -> list:
        """Windows in each run of `group` consecutive batches (gradient accumulation)."""
        sizes = [self.batch_size] * (len(self.order) // self.batch_size)
        if len(self.order) % self.batch_size:
            sizes.append(len(self.order) % self.batch_size)
        return [sum(sizes[i:i + group]) for i in range(0, len(sizes), group)]

    def __iter__(self):
        indices = torch.as_tensor(list(self.order), dtype=torch.long, device=self.dataset.series.device)
        for idx in indices.split(self.batch_size):
            yield self.dataset.gather(idx)


def train_loader(dataset: WindowDataset, batch_size: int, rank: int, world_size: int, seed: int,
                 shuffle: bool = True) -> WindowLoader:
    """DistributedSampler in every run (world 1 included), so single-process and DDP share one path."""
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                                 drop_last=False)
    return WindowLoader(dataset, batch_size, sampler)


def eval_loader(dataset: WindowDataset, batch_size: int, rank: int, world_size: int) -> WindowLoader:
    """A contiguous shard per rank without the duplicates DistributedSampler padding adds."""
    return WindowLoader(dataset, batch_size, shard_range(len(dataset), rank, world_size))
