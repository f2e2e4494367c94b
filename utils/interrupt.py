"""Ctrl-C and SIGTERM end a run with one line saying where it stopped and how to go on.

The signal becomes an `Interrupted` exception in the main thread, which run.py turns into that line and
exit code 128 + signal (130 for Ctrl-C, 143 for SIGTERM). A main thread blocked in a collective (its peer
stopped first) runs no Python handler; a watchdog thread then writes the same line and exits after a
grace period, so no rank waits for --dist_timeout or for torchrun's SIGKILL.
"""
import os
import signal
import threading

GRACE_SECONDS = 5.0
_state = {"where": "before training started", "next": "nothing was trained", "ending": False}


class Interrupted(BaseException):
    """Raised in the main thread by SIGINT or SIGTERM (a BaseException, like KeyboardInterrupt)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def doing(where: str, next_step: str) -> None:
    """What the process is doing now ("during epoch 3") and what to run after an interruption."""
    _state.update(where=where, next=next_step)


def ending() -> None:
    """This process is reporting how it ends (then os._exit): a stop that arrives now does not cut the report
    short; a second one still ends the process at once."""
    _state["ending"] = True


def message() -> str:
    return f"interrupted {_state['where']}; {_state['next']}"


def install(on_stuck) -> None:
    """SIGINT/SIGTERM raise Interrupted; if the main thread has not exited GRACE_SECONDS after a signal,
    on_stuck(signum) runs in the watchdog thread (it must end the process)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end)  # written by the C-level handler even while the main thread is blocked
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise)

    def watch() -> None:
        signum = os.read(read_end, 1)[0]
        threading.Event().wait(GRACE_SECONDS)
        on_stuck(signum)

    threading.Thread(target=watch, name="interrupt-watchdog", daemon=True).start()


def _raise(signum, frame) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second signal ends the process at once
    if not _state["ending"]:
        raise Interrupted(signum)
