class ConfigError(ValueError):
    """A user error (bad flag, bad file, bad data): reported as one line, exit code 2, no traceback."""
