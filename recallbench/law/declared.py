"""What the law knows of a plugin: the model kind an adapter declares, the family a task declares.

The core never looks a plugin up by its name: an adapter states its ``law_kind``
(``theory.MODEL_KINDS``: "designed", "linear", "full", or None) and a task its
``law_family`` (``theory.TASK_FAMILIES``: "ar", "mqar", or None), and the law reads them
from the registries::

    model_kind("linear-mamba")   # "linear"
    task_family("mqar-repeated-keys")   # "mqar"
    model_kind("not-installed")  # None: a black box

A name that is not registered, or whose plugin fails to load, is a black box (None); a
plugin that declares a value the law does not know is a ConfigError naming it.
"""
from __future__ import annotations

from recallbench.api.errors import ConfigError
from recallbench.api.registry import ADAPTERS, TASKS, Registry
from recallbench.law.theory import MODEL_KINDS, TASK_FAMILIES


def _declared(registry: Registry, name: str | None, attr: str, allowed: tuple[str, ...]):
    if not name:
        return None
    try:
        plugin = registry.get(name)
    except ConfigError:  # unknown here, or fails to load: a black box
        return None
    value = getattr(plugin, attr, None)
    if value is not None and value not in allowed:
        raise ConfigError(f"{registry.kind} {name!r} declares {attr} = {value!r}: "
                          f"one of {', '.join(allowed)} or None")
    return value


def model_kind(adapter: str | None) -> str | None:
    """The law's model kind of an adapter (its ``law_kind``), None for a black box."""
    return _declared(ADAPTERS, adapter, "law_kind", MODEL_KINDS)


def task_family(task: str | None) -> str | None:
    """The law's task family of a task (its ``law_family``), None when the law does not
    describe it."""
    return _declared(TASKS, task, "law_family", TASK_FAMILIES)
