class ConfigError(ValueError):
    """A user error (bad flag, bad file, bad data): reported as one line, exit code 2, no traceback."""


class TrainingError(RuntimeError):
    """Training cannot go on (a non-finite loss): reported as one line, exit code 1, on every rank."""


class OutputError(TrainingError):
    """An output cannot be written (disk full, folder unwritable): one line, exit code 1; the previous
    version of the file is intact."""
