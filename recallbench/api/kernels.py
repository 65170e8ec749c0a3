"""Which kernels an adapter runs on a device: the paths, the facts, the pre-flight check.

An adapter declares its path on a device with :meth:`recallbench.api.adapter.Adapter.kernel_path`,
``(path, reason)``, where ``path`` is one of

* ``"fused"``: the library's fused GPU kernels (CUDA, Triton);
* ``"reference"``: the library's pure-torch reference in place of its kernels: on a CPU, or
  on a GPU where the fused kernel cannot run (then slower, and said so before training);
* ``"own"``: the adapter's own torch code, the same on every device;
* ``"unavailable"``: nothing can run there; ``reason`` says why and how to fix it.

Adapters decide from facts, each read by one small function here that tests replace with
``monkeypatch``: :func:`cuda_capability`, :func:`triton_version`, :func:`importable`.
:func:`preflight` is the harness's check before anything is built: it raises
:class:`~recallbench.api.errors.UnavailableError` for an unavailable path and warns in one
line (:class:`KernelFallbackWarning`, :func:`fallback_message`) when a GPU falls back to
the reference, so that a run never stops with a traceback in the middle of training.
"""
from __future__ import annotations

import importlib
import warnings
from importlib import metadata

import torch

from recallbench.api.errors import UnavailableError

FUSED, REFERENCE, OWN, UNAVAILABLE = "fused", "reference", "own", "unavailable"
PATHS = (FUSED, REFERENCE, OWN, UNAVAILABLE)
TRITON = "triton"  # the distribution name of Triton


class KernelFallbackWarning(UserWarning):
    """A GPU run trains on the library's pure-torch reference: the fused kernel cannot run."""


# -- facts (replace these in tests) ----------------------------------------------------------
def cuda_capability(device: torch.device) -> tuple[int, int] | None:
    """A CUDA device's compute capability, e.g. (9, 0) for Hopper; None for any other device."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


def triton_version() -> str | None:
    """The installed Triton's version text, or None (read from its metadata, not imported)."""
    try:
        return metadata.version(TRITON)
    except metadata.PackageNotFoundError:
        return None


def importable(module: str) -> bool:
    """Whether ``import module`` gives the real module: a compiled extension that fails to
    load (built for another torch) is False, and so is a stand-in without a spec."""
    try:
        loaded = importlib.import_module(module)
    except Exception:  # ImportError, or an extension's own error while loading
        return False
    return getattr(loaded, "__spec__", None) is not None


# -- the decision's consequences ---------------------------------------------------------------
def fallback_message(adapter: str, device: torch.device, path: str, reason: str) -> str | None:
    """The one line said before a GPU run trains on the reference; None when there is nothing
    to say (a CPU, or the fused path)."""
    device = torch.device(device)
    if path != REFERENCE or device.type == "cpu":
        return None
    text = " ".join(reason.split())  # one line, whatever the reason holds
    return (f"adapter {adapter} on {device}: the fused kernel cannot run, training on the "
            f"pure-torch reference instead (slower): {text}")


def preflight(adapter_cls, device: torch.device) -> tuple[str, str]:
    """``adapter_cls.kernel_path(device)``, checked before a run builds anything: an
    unavailable path raises UnavailableError (one line with the reason and the fix), a GPU
    fallback to the reference warns once (:class:`KernelFallbackWarning`)."""
    path, reason = adapter_cls.kernel_path(device)
    if path == UNAVAILABLE:
        raise UnavailableError(f"adapter {adapter_cls.name} cannot run on {device}: {reason}")
    message = fallback_message(adapter_cls.name, device, path, reason)
    if message is not None:
        warnings.warn(message, KernelFallbackWarning, stacklevel=2)
    return path, reason
