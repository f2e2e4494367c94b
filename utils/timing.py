import time

import torch


class RegionTimer:
    """Seconds spent inside `with timer:` regions over an epoch, without a per-step sync:
    wall-clock on CPU, CUDA events on a GPU (read once, by total())."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.reset()

    def reset(self) -> None:
        self.seconds, self.events, self._start = 0.0, [], None

    def __enter__(self):
        if self.cuda:
            self._start = torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._start = time.perf_counter()

    def __exit__(self, *exc) -> None:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.events.append((self._start, end))
        else:
            self.seconds += time.perf_counter() - self._start

    def total(self) -> float:
        if self.events:
            self.events[-1][1].synchronize()
        return self.seconds + sum(s.elapsed_time(e) for s, e in self.events) / 1000


class NoTimer:
    """A RegionTimer for a single process, which has no other rank to be slower than: it records nothing (on a GPU
    a RegionTimer creates and records two CUDA events a step, host time that an overhead-bound model's step waits on)."""

    def reset(self) -> None:
        pass

    def __enter__(self):
        pass

    def __exit__(self, *exc) -> None:
        pass

    def total(self) -> float:
        return 0.0
