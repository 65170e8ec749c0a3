"""Where an adapter's code comes from: its distribution, version and source hash.

    >>> provenance("linear-mamba")
    {'distribution': 'recallbench', 'version': '0.1.0', 'library': None,
     'library_version': None, 'source_sha256': '3f1c...'}

* ``distribution``: the distribution that registered the adapter (the one declaring its
  ``recallbench.adapters`` entry point; ``recallbench`` for the built-ins; the ``origin``
  given to :meth:`~recallbench.api.registry.Registry.add` for one added at run time);
* ``version``: that distribution's installed version (None if it is not installed);
* ``library`` / ``library_version``: the distribution the adapter declares runs its mixer
  (:attr:`recallbench.api.adapter.Adapter.distribution`), and its version;
* ``source_sha256``: sha256 over the source of the module that defines the adapter class
  and of the modules of its own package that this module imports (its layer, usually),
  so an edited layer is a different provenance even at the same version.

:func:`source_sha256` hashes the module of any object (a task class, a factory function).
"""
from __future__ import annotations

import hashlib
import inspect
import sys
from importlib import metadata
from pathlib import Path

from recallbench.api.registry import ADAPTERS

BUILT_IN = "built-in"
CORE_DISTRIBUTION = "recallbench"


def _version(distribution: str | None) -> str | None:
    if not distribution:
        return None
    try:
        return metadata.version(distribution)
    except (metadata.PackageNotFoundError, ValueError):
        return None


def source_sha256(obj) -> str | None:
    """sha256 of the source file of ``obj`` if it is a module, else of the module defining
    it; None if there is none (a class made in an interactive session, a builtin)."""
    module = obj if inspect.ismodule(obj) else \
        sys.modules.get(getattr(obj, "__module__", None) or "")
    try:
        path = inspect.getsourcefile(module) if module is not None else None
        return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else None
    except (OSError, TypeError):
        return None


def _package_imports(module) -> list:
    """The modules of ``module``'s own top-level package that it names at module level."""
    top = module.__name__.split(".")[0]
    found = {}
    for value in vars(module).values():
        if inspect.ismodule(value):
            other = value
        elif inspect.isclass(value) or inspect.isfunction(value):
            other = sys.modules.get(getattr(value, "__module__", None) or "")
        else:
            continue
        if other is not None and other is not module and other.__name__.split(".")[0] == top:
            found[other.__name__] = other
    return [found[name] for name in sorted(found)]


def _code_sha256(cls) -> str | None:
    """sha256 over the sources of the module defining ``cls`` and its package imports."""
    module = sys.modules.get(cls.__module__)
    own = source_sha256(cls)
    if module is None or own is None:
        return own
    parts = [(module.__name__, own)]
    parts += [(m.__name__, source_sha256(m)) for m in _package_imports(module)]
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def provenance(adapter_name: str) -> dict:
    """Distribution, version, declared library and source hash of a registered adapter;
    ConfigError (one line) for an unknown or unloadable name."""
    cls = ADAPTERS.get(adapter_name)
    origin = ADAPTERS.origin(adapter_name)
    dist = CORE_DISTRIBUTION if origin == BUILT_IN else origin
    library = getattr(cls, "distribution", None)
    return {"distribution": dist, "version": _version(dist), "library": library,
            "library_version": _version(library), "source_sha256": _code_sha256(cls)}
