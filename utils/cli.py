"""What every command shares with run.py: bad input is one line on stderr, `error: <message>`, and exit code 2,
never a traceback; a failure that is no bug (an output that cannot be written, a run that failed) is one line and
exit code 1; Ctrl-C is one line and exit code 130; a bug keeps its traceback.

    if __name__ == "__main__":
        cli.run(main)

Commands parse with `ArgumentParser` (its errors are ConfigErrors) and raise ConfigError for bad values.
"""
import argparse
import os
import re
import sys

from utils.errors import ConfigError, TrainingError


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors (unknown flag, missing or malformed value) are one line naming the flag, not usage and
    message: a ConfigError for run()."""

    def error(self, message):
        raise ConfigError(f"{message} (see --help)")


def run(main, *args):
    """main(*args) as a command: returns its result; a user error ends the process with one line."""
    try:
        return main(*args)
    except ConfigError as e:
        _exit(2, f"error: {e}")
    except TrainingError as e:  # OutputError among them: the disk is full, the folder unwritable
        _exit(1, f"error: {e}")
    except KeyboardInterrupt as e:  # Ctrl-C: what was done and how to go on, if the command says
        _exit(130, f"interrupted: {e}" if str(e) else "interrupted")


def _exit(code: int, line: str) -> None:
    sys.stdout.flush()
    sys.stderr.write(line + "\n")
    sys.exit(code)


def at_least(low: int | float, kind=int):
    """An argparse type: a number of `kind` that is >= low."""
    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if not value >= low:  # NaN too
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {text}")
        return value
    return convert


def int_list(text: str) -> list:
    """An argparse type: a comma list of integers ("96,192")."""
    try:
        return [int(v) for v in text.split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of integers, got {text!r}") from None


def existing_file(path: str) -> str:
    """An argparse type: the path of a file that exists."""
    if not os.path.isfile(path):
        raise argparse.ArgumentTypeError(f"no such file: {path}")
    return path


def existing_folder(path: str) -> str:
    """An argparse type: the path of a folder that exists."""
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"no such folder: {path}")
    return path


def error_line(output: str, otherwise: str) -> str:
    """What a failed run.py process (or a torchrun job of them) said: the message of its first one-line error,
    before torchrun's summary of the failure; else the last line naming an error; else `otherwise`."""
    lines = [line.strip() for line in output.splitlines()]
    ours = [match.group(1) for match in map(re.compile(r"(?:\[rank \d+\] )?error: (.*)").fullmatch, lines) if match]
    named = [line for line in lines if "error" in line.lower()]
    return ours[0] if ours else named[-1] if named else otherwise
