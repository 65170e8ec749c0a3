"""Which implementation a transformers kernel wrapper runs for CPU inputs.

transformers binds some Mamba functions to mamba-ssm when mamba-ssm is importable.  The
parity tests against transformers' mixers mean something only when transformers runs its own
pure-torch path, so they ask first.  Two wrapper forms exist:

- up to 5.24, a plain closure over ``is_new_implementation`` (True: bound to the package);
- from 5.25, that closure inside a ``Func`` module (``forward`` closes over ``func``), with
  ``supported_devices``: a package bound only for CUDA still runs the torch path on CPU.

An unknown form counts as torch, so that the comparison runs rather than being skipped.
"""
from __future__ import annotations

import torch


def _cells(fn) -> dict:
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    return dict(zip(code.co_freevars, (c.cell_contents for c in (fn.__closure__ or ()))))


def hf_uses_torch(fn, device: str = "cpu") -> bool:
    """Whether transformers' wrapped kernel ``fn`` runs its torch path for inputs on ``device``."""
    if isinstance(fn, torch.nn.Module):  # transformers >= 5.25: unwrap the Func module
        fn = _cells(getattr(fn.forward, "__func__", fn.forward)).get("func", fn)
    cells = _cells(fn)
    if not cells.get("is_new_implementation", False):
        return True
    devices = cells.get("supported_devices")
    return devices is not None and device not in devices
