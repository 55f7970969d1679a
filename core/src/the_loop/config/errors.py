"""The one error a config can raise: its ``str()`` is the line the CLI prints after ``error:`` (then exit 2)."""


class ConfigError(Exception):
    """A config the CLI cannot use; ``str()`` is the one line to print after ``error:``."""
