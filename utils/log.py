"""Rank-aware logging: decided once at start-up, never with `if rank == 0` in loops."""
import logging
import sys

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
