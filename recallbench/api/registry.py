"""Name → plugin registries for tasks and adapters.

In-tree plugins register themselves with a decorator when their package is
imported (``recallbench.tasks`` / ``recallbench.adapters``); third-party plugins
are found through the entry-point groups ``recallbench.tasks`` and
``recallbench.adapters``.  Nothing is imported until a name is asked for, and a
plugin that fails to import is reported as unavailable instead of breaking
``import recallbench``::

    @TASKS.register("mqar")
    class MQAR(Task): ...

    # a third party, in its setup.cfg:
    # [options.entry_points]
    # recallbench.tasks =
    #     my-task = my_package.recall:MyTask
"""
from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Callable, Generic, TypeVar

from recallbench.api.errors import ConfigError, UnavailableError

T = TypeVar("T")


@dataclass
class Entry:
    """One registered name: where it comes from, and its object once loaded."""

    name: str
    origin: str  # "built-in" or the distribution that declares the entry point
    obj: object | None = None
    entry_point: object | None = None
    error: str | None = None  # why loading failed, if it did


class Registry(Generic[T]):
    def __init__(self, kind: str, group: str, builtin_package: str):
        self.kind = kind  # "task" / "adapter", used in messages
        self.group = group
        self.builtin_package = builtin_package
        self._entries: dict[str, Entry] = {}
        self._scanned = False

    # -- registration -------------------------------------------------------
    def register(self, name: str) -> Callable[[T], T]:
        """Class decorator for in-tree plugins."""

        def decorate(obj: T) -> T:
            existing = self._entries.get(name)
            if existing is not None and existing.obj is not None and existing.obj is not obj:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = Entry(name, "built-in", obj=obj)
            obj.name = name  # type: ignore[attr-defined]
            return obj

        return decorate

    def add(self, name: str, obj: T, *, origin: str = "third-party") -> T:
        """Register ``obj`` under ``name`` at run time (tests, notebooks); undo with remove.

        ``origin`` is the distribution credited in records and listings.  A name that is
        already registered is a ValueError: remove it first.
        """
        self._scan()
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered "
                             f"(from {self._entries[name].origin})")
        self._entries[name] = Entry(name, origin, obj=obj)
        obj.name = name  # type: ignore[attr-defined]
        return obj

    def remove(self, name: str) -> None:
        """Forget a name registered with :meth:`add` (built-ins and entry points come back
        on the next scan); KeyError if it is not registered."""
        self._scan()
        if name not in self._entries:
            raise KeyError(f"{self.kind} {name!r} is not registered")
        del self._entries[name]

    def origin(self, name: str) -> str:
        """Where ``name`` comes from: "built-in" or the distribution that declares it."""
        self._scan()
        entry = self._entries.get(name)
        if entry is None:
            self.get(name)  # raises the one-line unknown-name error
        return entry.origin  # type: ignore[union-attr]

    def require(self, name: str, *, where: str = "") -> T:
        """The plugin ``name`` if it can run here; UnavailableError with the reason if not.

        The one availability check: the CLI, sweeps, leaderboards and the pytest plugin
        all ask it, so every caller reports an unavailable plugin the same way.
        """
        obj = self.get(name)
        check = getattr(obj, "availability", None)
        ok, why = check() if callable(check) else (True, "")
        if not ok:
            prefix = f"{where}: " if where else ""
            raise UnavailableError(f"{prefix}{self.kind} {name} cannot run here: {why}")
        return obj

    # -- discovery ----------------------------------------------------------
    def _scan(self) -> None:
        if self._scanned:
            return
        self._scanned = True
        importlib.import_module(self.builtin_package)  # runs the decorators
        for ep in entry_points(group=self.group):
            if ep.name in self._entries:
                continue  # an in-tree plugin of the same name wins
            dist = getattr(getattr(ep, "dist", None), "name", None) or ep.value
            self._entries[ep.name] = Entry(ep.name, dist, entry_point=ep)

    def names(self) -> list[str]:
        self._scan()
        return sorted(self._entries)

    def get(self, name: str) -> T:
        """The plugin class called ``name``; a one-line ConfigError otherwise."""
        self._scan()
        entry = self._entries.get(name)
        if entry is None:
            close = difflib.get_close_matches(name, self._entries, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            known = ", ".join(sorted(self._entries))
            raise ConfigError(f"unknown {self.kind} {name!r}{hint} (known: {known})")
        if entry.obj is None:
            try:
                entry.obj = entry.entry_point.load()  # type: ignore[union-attr]
                entry.obj.name = name
            except Exception as exc:  # a broken plugin must not take us down
                entry.error = f"{type(exc).__name__}: {exc}"
                raise ConfigError(
                    f"{self.kind} {name!r} from {entry.origin} failed to load: {entry.error}"
                ) from None
        return entry.obj  # type: ignore[return-value]

    def describe(self) -> list[tuple[str, str, bool, str]]:
        """(name, origin, available, reason) for every registered plugin."""
        rows = []
        for name in self.names():
            entry = self._entries[name]
            try:
                obj = self.get(name)
            except ConfigError as exc:
                rows.append((name, entry.origin, False, str(exc)))
                continue
            check = getattr(obj, "availability", None)
            ok, why = check() if callable(check) else (True, "")
            rows.append((name, entry.origin, ok, why))
        return rows


TASKS: Registry = Registry("task", "recallbench.tasks", "recallbench.tasks")
ADAPTERS: Registry = Registry("adapter", "recallbench.adapters", "recallbench.adapters")
