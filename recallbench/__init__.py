"""recallbench: how much can a recurrent layer recall, and how close is that to its state size?

Public entry points::

    from recallbench import TASKS, ADAPTERS, resolve, run
    from recallbench import Task, Adapter, PreNormResidual, IGNORE   # to write a plugin

The package is grouped by role, in the order a run flows through it:

* ``api/``            contracts: config, fields, errors, registries, Task, Adapter, records
* ``harness/``        one training run: model wrapper, data, metrics, Lightning module, ensembles
* ``runs/``           many runs: sweep grids, the result store, executors, adaptive search
* ``law/``            the recall law, its fits, the scorer and its report
* ``leaderboard/``    suites, submissions, validation, rendering
* ``pytest_plugin/``  recall tests inside a user's pytest suite
* ``cli/``            one module per ``recallbench`` subcommand

Task and model plugins live outside the core, in ``recallbench.tasks`` and
``recallbench.adapters`` (or any installed package, through entry points).
"""
from recallbench.api.errors import ConfigError, UnavailableError
from recallbench.api.registry import ADAPTERS, TASKS

__version__ = "0.1.0"

__all__ = ["ADAPTERS", "TASKS", "ConfigError", "UnavailableError", "resolve", "run",
           "Task", "Adapter", "PreNormResidual", "IGNORE", "__version__"]

_LAZY = {  # heavy pieces (torch, Lightning) load on first use
    "resolve": ("recallbench.api.config", "resolve"),
    "run": ("recallbench.harness.train", "run"),
    "Task": ("recallbench.api.task", "Task"),
    "IGNORE": ("recallbench.api.task", "IGNORE"),
    "Adapter": ("recallbench.api.adapter", "Adapter"),
    "PreNormResidual": ("recallbench.api.adapter", "PreNormResidual"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'recallbench' has no attribute {name!r}")
