"""Writing outputs safely: atomically (temporary file, fsync, rename), and with one clear error when the disk
is full or the folder unwritable, leaving the previous file intact and no temporary file behind."""
import csv
import io
import os

from utils.errors import OutputError


def write_atomic(path: str, write, mode: str = "wb") -> None:
    """write(f) fills a temporary file beside `path`, which then replaces `path` in one rename."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(tmp, mode) as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:  # also an interruption mid-write: never leave a temporary file
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(e, OSError):
            raise OutputError(f"cannot write {path}: {e.strerror or e}") from None
        raise


def guarded(path: str, action, *args, **kwargs):
    """action(*args, **kwargs): an output action (a plot, a TensorBoard flush) that writes `path`; a failed
    write is one line."""
    try:
        return action(*args, **kwargs)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from None


def write_csv(path: str, fields, rows: list) -> None:
    """A CSV of dict rows (keys beyond fields ignored), written atomically."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, lambda f: f.write(buffer.getvalue().encode()))
