"""Errors that are the user's to fix.

A :class:`ConfigError` carries one line that names the offending field and what
would be allowed; the CLI prints it and exits with status 2, without a traceback.
"""


class ConfigError(ValueError):
    """A bad configuration value, task parameter, adapter name or input file."""


class UnavailableError(RuntimeError):
    """A plugin exists but cannot run on this machine (missing package, no CUDA)."""


def reason(exc: BaseException, limit: int = 500) -> str:
    """``Type: first line of the message``, at most ``limit`` characters: how a failure that
    is not the user's (a crashed run, a dead worker) is told in one line and in a record."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line[:limit]
