"""Errors that are the user's to fix.

A :class:`ConfigError` carries one line that names the offending field and what
would be allowed; the CLI prints it and exits with status 2, without a traceback.
"""


class ConfigError(ValueError):
    """A bad configuration value, task parameter, adapter name or input file."""


class UnavailableError(RuntimeError):
    """A plugin exists but cannot run on this machine (missing package, no CUDA)."""
