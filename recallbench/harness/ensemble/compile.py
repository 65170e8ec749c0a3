"""Opt-in ``torch.compile`` of a batched ensemble's vmapped blocks, with a safe fallback.

A tiny model on a GPU spends a training step launching a few hundred small kernels, so
fusing them is where a compiler can help; on a CPU compiling takes minutes (inductor
generates and builds C++) for a gain of a few times per step.  Off by default
(``run_ensemble(..., compile=None)``); ``recallbench sweep --ensemble K --compile [MODE]``
turns it on.  MODE is one of :data:`COMPILE_MODES`: ``default`` (inductor),
``reduce-overhead`` (inductor with CUDA graphs, for launch-bound GPU steps),
``max-autotune`` (inductor's autotuning, no CUDA graphs), or ``aot_eager`` (traces and
runs the same graph without generating code: checks the path, gains nothing).

What is compiled: the vmapped forward of the blocks (``FunctionalModel.hidden``), forward
and backward, on the training step only; validation and the optimizer run as before.
While it compiles, the training step keeps all K members in the batch (a stopped member's
rows are computed and discarded, its weights untouched) so that the shapes never change
and nothing is compiled twice.

The first compiled call is checked against the plain one on the same inputs; when
compiling fails (no C compiler, an op the compiler does not support) or the two differ,
one :class:`CompileFallbackWarning` says so and the ensemble trains uncompiled.
"""
from __future__ import annotations

import warnings
from typing import Callable

import torch

from recallbench.api.errors import reason

#: ``--compile`` modes → ``torch.compile`` keyword arguments
COMPILE_MODES: dict[str, dict] = {
    "default": {},
    "reduce-overhead": {"mode": "reduce-overhead"},
    "max-autotune": {"mode": "max-autotune-no-cudagraphs"},
    "aot_eager": {"backend": "aot_eager"},
}


class CompileFallbackWarning(UserWarning):
    """The ensemble's compiled step could not be used: it trains uncompiled."""


def check_mode(mode: str | None) -> None:
    """ConfigError unless ``mode`` is None or one of :data:`COMPILE_MODES`."""
    if mode is not None and mode not in COMPILE_MODES:
        from recallbench.api.errors import ConfigError
        from recallbench.api.fields import short

        raise ConfigError(f"--compile {short(mode, 40)} is not allowed: one of "
                          f"{', '.join(COMPILE_MODES)}")


class Compiled:
    """``fn`` compiled with ``mode``, until the first call shows it cannot be used.

    The first call runs both the compiled and the plain ``fn`` and compares them (values
    within ``rtol``); any exception or difference makes every later call plain.
    """

    def __init__(self, fn: Callable, mode: str, rtol: float = 1e-4):
        check_mode(mode)
        self.fn, self.mode, self.rtol = fn, mode, rtol
        self.compiled: Callable | None = None
        self.checked = False
        try:
            self.compiled = torch.compile(fn, **COMPILE_MODES[mode])
        except Exception as exc:  # noqa: BLE001 - any failure means "train uncompiled"
            self._fall_back(f"torch.compile failed ({reason(exc, 200)})")

    @property
    def active(self) -> bool:
        """Whether calls still go through the compiled function."""
        return self.compiled is not None

    def _fall_back(self, why: str) -> None:
        self.compiled = None
        warnings.warn(f"ensemble --compile {self.mode}: {why}; training uncompiled",
                      CompileFallbackWarning, stacklevel=3)

    def __call__(self, *args):
        if self.compiled is None:
            return self.fn(*args)
        if self.checked:
            return self.compiled(*args)
        self.checked = True
        try:
            got = self.compiled(*args)
        except Exception as exc:  # noqa: BLE001
            self._fall_back(f"the compiled step failed ({reason(exc, 200)})")
            return self.fn(*args)
        want = self.fn(*args)
        gap = (got.detach() - want.detach()).abs().max().item()
        scale = 1.0 + want.detach().abs().max().item()
        if not gap <= self.rtol * scale:
            self._fall_back(f"the compiled step differs from the plain one (max |Δ| = {gap:.3g})")
            return want
        return got
