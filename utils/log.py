"""Rank-aware logging: decided once at start-up, never with `if rank == 0` in loops."""
import logging
import sys
import time

from tqdm import tqdm

GROUP = "group"


def setup_logging(rank: int, is_main: bool) -> None:
    """Main rank logs INFO; other ranks only warnings and errors, tagged with their rank."""
    prefix = "" if is_main else f"[rank {rank}] "
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s {prefix}%(levelname)s %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if is_main else logging.WARNING)
    # facts about the whole group (the same on every rank) are reported once, by the main rank
    logging.getLogger(GROUP).setLevel(logging.INFO if is_main else logging.CRITICAL)


PROGRESS_SECONDS = 30.0  # between two progress lines where no bar can be drawn


def progress_bar(total: int, what: str):
    """The main rank's progress through `total` batches: tqdm's bar on a terminal; elsewhere (a log file, a
    job's output) a line every PROGRESS_SECONDS, so a long epoch is never silent."""
    if sys.stderr.isatty():
        return tqdm(total=total, desc=what, leave=False)
    return _ProgressLines(total, what)


class _ProgressLines:
    def __init__(self, total: int, what: str):
        self.total, self.what, self.done = total, what, 0
        self.start = self.last = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= PROGRESS_SECONDS and self.done < self.total:
            rate = self.done / (now - self.start)
            left = (self.total - self.done) / rate
            logging.getLogger(__name__).info("%s: %d/%d batches (%.0f%%), %.2f batches/s, about %s left", self.what,
                                             self.done, self.total, 100 * self.done / self.total, rate,
                                             time.strftime("%H:%M:%S", time.gmtime(left)))
            self.last = now

    def close(self) -> None:
        pass


class NoProgress:
    """Other ranks: the main rank reports the group's progress."""

    def __init__(self, total: int, what: str):
        pass

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass
