"""Reversible swaps of a library's GPU kernels for pure-torch references.

A library's layer classes (mamba-ssm's ``Mamba``, fla's ``GatedLinearAttention``, …) are
plain PyTorch around kernels that only run on a GPU.  To run the real classes on a CPU,
the names those classes look their kernels up by are re-bound, explicitly and
reversibly, to torch functions.  A library declares its swaps, one :class:`Swap` a line,
in a :class:`SwapSet`; this module does the patching, for both libraries alike:

* ``target`` is ``"module:name"`` (a name looked up in that module at call time, e.g. a
  kernel a layer module imported into its namespace) or ``"module:Class.method"``.
* ``replacement`` is a torch function, ``None`` (the library then takes its own fallback
  branch), or ``"module:name"``: a reference the library ships, imported at install.
* Nothing is patched at import.  :meth:`SwapSet.install` patches, :meth:`SwapSet.uninstall`
  undoes one install; installs nest (reference-counted) and the outermost uninstall puts
  the exact original objects back.  :meth:`SwapSet.applied` does both around a block.
* With ``dispatch=True`` each patched name decides per call: a CPU tensor (the first tensor
  argument) goes to the replacement, anything else to the original, so CUDA calls keep
  the fused kernels even while the swaps are installed.  Such a set may stay installed for
  the whole process (:meth:`SwapSet.keep_installed`); that is what makes the swapped
  functions safe to call from a backward pass that runs after the forward returned.
  :meth:`SwapSet.route_everywhere` sends the calls of chosen targets to the replacement on
  every device: the GPU fallback for a kernel that cannot run there (the replacements are
  plain torch and run on CUDA tensors too).
* Without dispatch the swap is process-wide while installed: install it only around the
  work that needs it (:meth:`SwapSet.applied`), and do not run the same library on CUDA
  with its kernels in another thread meanwhile.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import threading
from typing import Any, Callable, Iterator

import torch


@dataclasses.dataclass(frozen=True)
class Swap:
    """One re-bound name: ``target`` gets ``replacement``, which is built from ``reference``."""

    target: str  # "module:name" or "module:Class.method"
    replacement: Callable | str | None  # a function, "module:name" (imported at install), None
    reference: str  # what the replacement computes with (for docs and reports)


def resolve(target: str) -> tuple[Any, str]:
    """``"module:Class.method"`` -> (the object holding the name, the name)."""
    module_name, _, path = target.partition(":")
    owner: Any = importlib.import_module(module_name)
    *parents, attr = path.split(".")
    for p in parents:
        owner = getattr(owner, p)
    return owner, attr


def _bound(owner: Any, attr: str) -> Any:
    """The object bound at ``owner.attr`` (a class's own attribute, not a bound method)."""
    return owner.__dict__[attr] if isinstance(owner, type) else getattr(owner, attr)


def _replacement(swap: Swap) -> Any:
    if isinstance(swap.replacement, str):
        owner, attr = resolve(swap.replacement)
        return getattr(owner, attr)
    return swap.replacement


def _first_tensor(args, kwargs) -> torch.Tensor | None:
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            return a
    return None


def dispatching(original: Callable, replacement: Callable, target: str,
                everywhere: frozenset[str] | set[str] = frozenset()) -> Callable:
    """Call ``replacement`` for CPU tensors, ``original`` (the GPU kernel) for anything else;
    ``replacement`` on every device while ``target`` is in ``everywhere`` (read at each call)."""

    def swapped(*args, **kwargs):
        t = _first_tensor(args, kwargs)
        if t is not None and (t.device.type == "cpu" or target in everywhere):
            return replacement(*args, **kwargs)
        return original(*args, **kwargs)

    swapped.__name__ = getattr(original, "__name__", target)
    swapped.__doc__ = f"CPU swap of {target}: {replacement.__doc__ or replacement.__name__}"
    swapped.__wrapped_original__ = original  # type: ignore[attr-defined]
    swapped.__swap_target__ = target  # type: ignore[attr-defined]
    return swapped


class SwapSet:
    """A library's swaps, installed and restored together (see the module docstring)."""

    def __init__(self, name: str, swaps: tuple[Swap, ...], *, dispatch: bool,
                 before_install: Callable[[], Any] | None = None):
        self.name = name  # for messages, e.g. "fla CPU references"
        self.swaps = swaps
        self.dispatch = dispatch
        self.before_install = before_install  # e.g. make the library importable
        self._lock = threading.RLock()
        self._depth = 0
        self._kept = False
        self._saved: list[tuple[Any, str, Any]] = []  # (owner, attribute, original), install order
        self.everywhere: set[str] = set()  # targets whose every call takes the replacement

    def __iter__(self) -> Iterator[Swap]:
        return iter(self.swaps)

    def __len__(self) -> int:
        return len(self.swaps)

    def _patch(self) -> None:
        if self.before_install is not None:
            self.before_install()
        plan = []
        for swap in self.swaps:  # resolve everything first: a failure patches nothing
            owner, attr = resolve(swap.target)
            original, new = _bound(owner, attr), _replacement(swap)
            if self.dispatch:
                new = dispatching(original, new, swap.target, self.everywhere)
            plan.append((owner, attr, original, new))
        for owner, attr, original, new in plan:
            setattr(owner, attr, new)
            self._saved.append((owner, attr, original))

    def install(self) -> None:
        """Patch every target (the first of nested installs does it).  Imports the library."""
        with self._lock:
            if self._depth == 0:
                self._patch()
            self._depth += 1

    def uninstall(self) -> None:
        """Undo one :meth:`install`; the outermost one restores every original object."""
        with self._lock:
            if self._depth == 0:
                raise RuntimeError(f"{self.name}: uninstall() without install()")
            self._depth -= 1
            if self._depth == 0:
                self._kept = False
                while self._saved:
                    owner, attr, original = self._saved.pop()
                    setattr(owner, attr, original)

    def keep_installed(self) -> None:
        """Install once for the rest of the process (idempotent); dispatching sets only."""
        if not self.dispatch:
            raise RuntimeError(f"{self.name}: only dispatching swaps may stay installed")
        with self._lock:
            if not self._kept:
                self.install()
                self._kept = True

    def route_everywhere(self, targets) -> None:
        """Keep installed, and send every call of ``targets`` to its replacement on any device
        from now on (a dispatching set's GPU fallback for kernels that cannot run there)."""
        targets = set(targets)
        unknown = targets - {s.target for s in self.swaps}
        if unknown:
            raise KeyError(f"{self.name}: no swap for {', '.join(sorted(unknown))}")
        self.keep_installed()
        with self._lock:
            self.everywhere.update(targets)

    def installed(self) -> bool:
        with self._lock:
            return self._depth > 0

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """``with swaps.applied(): model(x)``: the references in place of the kernels."""
        self.install()
        try:
            yield
        finally:
            self.uninstall()

    def current(self, target: str) -> Any:
        """The object bound at ``target`` now (for tests: is it the original?)."""
        return _bound(*resolve(target))
