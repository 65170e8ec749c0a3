"""recallbench: how much can a recurrent layer recall, and how close is that to its state size?

Public entry points::

    from recallbench import TASKS, ADAPTERS, resolve, run
"""
from .errors import ConfigError, UnavailableError
from .registry import ADAPTERS, TASKS

__version__ = "0.1.0"

__all__ = ["ADAPTERS", "TASKS", "ConfigError", "UnavailableError", "resolve", "run", "__version__"]


def __getattr__(name):  # heavy pieces (Lightning) load on first use
    if name == "resolve":
        from .config import resolve

        return resolve
    if name == "run":
        from .train import run

        return run
    raise AttributeError(name)
