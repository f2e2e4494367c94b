"""torchrun with the ending of a run.py run: `python -m scripts.torchrun <torchrun's arguments>` launches exactly as
torchrun does (scripts/launch.sh uses it), but a stop or a failed worker ends in one line and the exit code a
single process would give, not torchrun's own traceback and exit code 1:

    Ctrl-C or SIGTERM          each rank's "interrupted ..." line, then one line from here; exit 128 + signal
    a worker failed            each rank's "error: ..." line, then one line from here; exit the first failure's
                               code (2 for bad input, 1 for a failed run)
"""
import os
import signal
import sys

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run


def main(argv=None) -> None:
    try:
        run(parse_args(sys.argv[1:] if argv is None else argv))
    except SignalException as e:
        _exit(128 + e.sigval, f"torchrun: stopped by {signal.Signals(e.sigval).name}; the workers stopped with it")
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        code = failure.exitcode if failure.exitcode > 0 else 128 - failure.exitcode  # -N: killed by signal N
        _exit(code, f"torchrun: {len(e.failures)} worker(s) failed, rank {rank} first (exit code {code}); "
                    "their errors are above")


def _exit(code: int, line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
