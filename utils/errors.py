class ConfigError(ValueError):
    """A user error (bad flag, bad file, bad data): reported as one line, exit code 2, no traceback."""


class TrainingError(RuntimeError):
    """Training cannot go on (a non-finite loss): reported as one line, exit code 1, on every rank."""
