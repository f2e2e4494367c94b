import contextlib
import time

import torch


class RegionTimer:
    """Seconds spent inside `measure()` regions over an epoch, without a per-step sync:
    wall-clock on CPU, CUDA events on a GPU (read once, by total())."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.reset()

    def reset(self) -> None:
        self.seconds, self.events = 0.0, []

    @contextlib.contextmanager
    def measure(self):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self.events.append((start, end))
        else:
            start = time.perf_counter()
            yield
            self.seconds += time.perf_counter() - start

    def total(self) -> float:
        if self.events:
            self.events[-1][1].synchronize()
        return self.seconds + sum(s.elapsed_time(e) for s, e in self.events) / 1000
